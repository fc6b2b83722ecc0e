# shellcheck shell=bash
# lib.sh: what up.sh, down.sh, load-image.sh and pvs.sh share. Sourced, not run.
#
# One node of upstream Kubernetes v1.34.4 (kbin, built from test/k8s/kbin) on
# Debian's containerd 1.6, runc and CNI plugins; everything it writes lives
# under $FORGE_K8S_DIR except what the kernel and the CNI plugins keep
# globally (iptables chains, kbr0, netns, kubepods cgroups, two sysctls), which
# down.sh removes or restores.
set -euo pipefail

K8S_VERSION=v1.34.4
K8S_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
K8S_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/forge/k8s
D=${FORGE_K8S_DIR:-$K8S_CACHE/cluster}
# The node's name. The apiserver reaches the kubelet by it
# (--kubelet-preferred-address-types=Hostname), so it must resolve to
# 127.0.0.1 on any machine: localhost does.
NODE=localhost
POD_CIDR=198.18.0.0/24     # RFC 2544 benchmarking range: routed by no network here
SERVICE_CIDR=198.19.0.0/24
EGRESS_CIDR=198.18.0.0/15
NODEPORT_ADDR=127.0.0.1
KUBECONFIG_FILE=$D/kubeconfig
CTD_SOCK=$D/ctd/containerd.sock
PAUSE_REF=localhost/pause:3.10
# The egress rule's comment, which down.sh finds it by.
EGRESS_COMMENT=forge-k8s-egress

log() { echo "k8s: $*" >&2; }
die() {
	echo "k8s: $*" >&2
	exit 1
}

# kbin: the cached multi-call binary (built when missing).
kbin_path() { "$K8S_ROOT/scripts/k8s/kbin.sh"; }

kubectl() { "$D/bin/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
ctr() { command ctr --address "$CTD_SOCK" --namespace k8s.io "$@"; }

# alive NAME: the component's recorded pid runs.
alive() {
	local f=$D/pids/$1.pid
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# start NAME CMD...: run a component in the background, its output in
# logs/NAME.log, its pid in pids/NAME.pid (down.sh stops it by that pid).
start() {
	local name=$1
	shift
	mkdir -p "$D/logs" "$D/pids"
	setsid "$@" >>"$D/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$D/pids/$name.pid"
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds or the deadline.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "timed out after ${secs}s waiting for $what (logs: $D/logs)"
		sleep 0.2
	done
}

# stop NAME [SECONDS]: SIGTERM the recorded pid, SIGKILL after the grace.
stop() {
	local name=$1 grace=${2:-10} f=$D/pids/$1.pid pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + grace))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 5))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
	fi
	rm -f "$f"
}

# Host settings the node changes (the bridge plugin: ip_forward; kube-proxy:
# route_localnet for NodePorts on 127.0.0.1; the kubelet: its kernel
# defaults, as protectKernelDefaults is off): up.sh saves them once, down.sh
# puts them back.
SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.ipv6.conf.all.forwarding
	vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.bridge.bridge-nf-call-iptables
	net.netfilter.nf_conntrack_max)
