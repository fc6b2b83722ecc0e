// Command ocipack packs a directory tree as a one-layer OCI image layout
// with forge's own image code (rootfs.WriteLayout): `make oci` builds
// forge's image with it, so no Docker, Podman or buildah is needed.
//
//	ocipack -root TREE -out DIR -ref NAME [-entrypoint JSON] [-cmd JSON] [-env K=V]... [-label K=V]...
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/mcp-forge/forge/rootfs"
)

type pairs []string

func (p *pairs) String() string { return strings.Join(*p, ",") }
func (p *pairs) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*p = append(*p, v)
	return nil
}

func main() {
	root := flag.String("root", "", "directory tree to pack (required)")
	out := flag.String("out", "", "OCI layout directory to write (required)")
	ref := flag.String("ref", "", "image name, the layout's ref.name (required)")
	entrypoint := flag.String("entrypoint", "", "entrypoint as a JSON array")
	cmd := flag.String("cmd", "", "command as a JSON array")
	var env, labels pairs
	flag.Var(&env, "env", "KEY=VALUE of the image's environment (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE label (repeatable)")
	flag.Parse()
	if *root == "" || *out == "" || *ref == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	cfg := rootfs.LayoutConfig{RefName: *ref, Env: env, Labels: map[string]string{}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		cfg.Labels[k] = v
	}
	for _, a := range []struct {
		flag string
		dst  *[]string
	}{{*entrypoint, &cfg.Entrypoint}, {*cmd, &cfg.Cmd}} {
		if a.flag != "" {
			if err := json.Unmarshal([]byte(a.flag), a.dst); err != nil {
				fmt.Fprintf(os.Stderr, "ocipack: %q is not a JSON array of strings: %v\n", a.flag, err)
				os.Exit(2)
			}
		}
	}
	if err := rootfs.WriteLayout(context.Background(), *out, *root, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "ocipack: %v\n", err)
		os.Exit(1)
	}
}
