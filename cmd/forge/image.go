package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
)

const imageUsage = `Usage:
  forge image ls [--json]           list images
  forge image pull REF              pull from a registry (docker://NAME:TAG)
  forge image import REF            import an archive or layout: oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE
  forge image bootstrap [NAME] [--suite bookworm|trixie] [--packages P1,P2] [--rebuild]
                                    build forge/python:3.11 from Debian 12's packages (or, with packages,
                                    forge/python-data:3.13 from Debian 13's); --suite picks the other
  forge image rm REF                remove an image
`

func cmdImage(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usagef("image: missing subcommand\n\n%s", imageUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "ls", "list":
		return imageLs(ctx, g, args)
	case "pull", "import":
		return imagePull(ctx, g, sub, args)
	case "bootstrap":
		return imageBootstrap(ctx, g, args)
	case "rm", "remove":
		return imageRm(ctx, g, args)
	case "help", "-h", "--help":
		fmt.Fprint(g.stdout, imageUsage)
		return nil
	}
	return usagef("image: unknown subcommand %q\n\n%s", sub, imageUsage)
}

func (g *globals) openStore(ctx context.Context) (*rootfs.Store, error) {
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, err
	}
	return g.openStoreFor(ctx, cfg)
}

// openStoreFor opens the image store of configuration cfg.
func (g *globals) openStoreFor(ctx context.Context, cfg *profiles.Config) (*rootfs.Store, error) {
	return rootfs.Open(ctx, rootfs.Options{StateDir: cfg.StateDir, Progress: g.stderr, Logger: g.log})
}

func imageLs(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("image ls", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return usagef("image ls: takes only --json\n\n%s", imageUsage)
	}
	st, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	imgs, err := st.Images(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		if imgs == nil {
			imgs = []rootfs.Image{}
		}
		return json.NewEncoder(g.stdout).Encode(imgs)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tCREATED")
	for _, im := range imgs {
		name := "<none>"
		if len(im.Names) > 0 {
			name = strings.Join(im.Names, ",")
		}
		fmt.Fprintf(tw, "%s\t%.12s\t%s\t%s\n", name, im.ID, humanSize(im.Size), im.Created.Format(time.DateTime))
	}
	return tw.Flush()
}

func imagePull(ctx context.Context, g *globals, verb string, args []string) error {
	if len(args) != 1 {
		return usagef("image %s: expected one REF\n\n%s", verb, imageUsage)
	}
	if _, err := rootfs.ParseReference(args[0]); err != nil {
		return usageError{err}
	}
	st, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	im, err := st.Pull(ctx, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s %.12s (%s, %s)\n", strings.Join(im.Names, ","), im.ID, humanSize(im.Size), time.Since(start).Round(time.Millisecond))
	return nil
}

func imageBootstrap(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("image bootstrap", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pkgs := fs.String("packages", "", "")
	rebuild := fs.Bool("rebuild", false, "")
	mirror := fs.String("mirror", "", "")
	suite := fs.String("suite", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 1 {
		return usagef("image bootstrap: [NAME] [--suite S] [--packages P1,P2] [--rebuild] [--mirror URL]\n\n%s", imageUsage)
	}
	opts := rootfs.BootstrapOptions{Name: fs.Arg(0), Suite: *suite, Rebuild: *rebuild, Mirror: *mirror, Progress: g.stderr}
	if *pkgs != "" {
		for _, p := range strings.Split(*pkgs, ",") {
			if p = strings.TrimSpace(p); p != "" {
				opts.Packages = append(opts.Packages, p)
			}
		}
	}
	st, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	im, err := st.Bootstrap(ctx, opts)
	if errors.Is(err, rootfs.ErrUnknownSuite) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s %.12s (%s, %s)\n", strings.Join(im.Names, ","), im.ID, humanSize(im.Size), time.Since(start).Round(time.Millisecond))
	return nil
}

func imageRm(ctx context.Context, g *globals, args []string) error {
	if len(args) != 1 {
		return usagef("image rm: expected one REF\n\n%s", imageUsage)
	}
	st, err := g.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Remove(ctx, args[0]); err != nil {
		if errors.Is(err, rootfs.ErrImageNotFound) {
			return usageError{err}
		}
		return err
	}
	fmt.Fprintf(g.stdout, "removed %s\n", args[0])
	return nil
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
