// Command kbin is upstream Kubernetes v1.34.4 (and etcd) as one multi-call
// binary, built from the Go module proxy for forge's test cluster (make k8s-up).
//
// k8s.io/kubernetes cannot be `go install`ed (its go.mod has replace
// directives), but it can be imported as a library: this main dispatches on
// argv[0] or its first argument to each component's cobra command.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: kbin etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [flags]"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if strings.HasPrefix(name, "kbin") { // kbin itself, or its cached copy kbin-VERSION-HASH
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	var cmd *cobra.Command
	switch name {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	case "kube-apiserver":
		cmd = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		cmd = kcm.NewControllerManagerCommand()
	case "kube-scheduler":
		cmd = scheduler.NewSchedulerCommand()
	case "kubelet":
		cmd = kubelet.NewKubeletCommand(context.Background())
	case "kube-proxy":
		cmd = proxy.NewProxyCommand()
	case "kubectl":
		cmd = kubectl.NewDefaultKubectlCommand()
	default:
		fmt.Fprintf(os.Stderr, "kbin: unknown component %q\n%s\n", name, usage)
		os.Exit(2)
	}
	cmd.SetArgs(args)
	os.Exit(cli.Run(cmd))
}
