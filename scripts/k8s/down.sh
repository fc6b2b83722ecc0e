#!/usr/bin/env bash
# down.sh (make k8s-down): stop the test cluster that up.sh started and put
# the host back: every process by its recorded pid (and the containerd shims
# of this cluster's socket), mounts under $FORGE_K8S_DIR, KUBE-* iptables
# chains and the egress rule, kbr0, the pods' netns, the kubepods cgroups and
# the sysctls the node changed. Nothing up is fine: it only cleans.
source "$(dirname "$0")/lib.sh"
shopt -s globstar nullglob
[[ $(id -u) -eq 0 ]] || die "needs root"
[[ -d $D ]] || {
	log "nothing up ($D does not exist)"
	exit 0
}
t0=$SECONDS

# 1. Pods first, while the kubelet and containerd still run, so that the CNI
#    DEL of each sandbox releases its veth, netns and IP. Nothing recreates
#    them: the controllers stop first.
stop kube-controller-manager
stop kube-scheduler
if alive kube-apiserver && alive kubelet && alive containerd; then
	kubectl delete pods --all --all-namespaces --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
	deadline=$((SECONDS + 45))
	while [[ -n $(ctr tasks ls -q 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.3; done
fi
stop kubelet
stop kube-proxy

# 2. Whatever still runs in containerd, then the shims of this socket (found
#    by their --address argument, so another containerd's are left alone).
#    On cgroup v1 a task frozen in a nested freezer cgroup of a pod (the
#    sandboxes of a forge killed while they were paused) takes no SIGKILL
#    and would hold its container, and `ctr tasks delete`, forever: thaw
#    them first.
for f in /sys/fs/cgroup/freezer/kubepods*/**/freezer.state; do
	[[ -f $f && $(<"$f") != THAWED ]] && { echo THAWED >"$f"; } 2>/dev/null || true
done
if alive containerd; then
	for id in $(ctr tasks ls -q 2>/dev/null); do
		timeout 30 ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		timeout 30 ctr tasks delete -f "$id" >/dev/null 2>&1 || true
	done
fi
stop containerd 15
for p in /proc/[0-9]*; do
	cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") 2>/dev/null || continue
	if [[ $cmd == *containerd-shim* && $cmd == *"-address $CTD_SOCK "* ]]; then
		kill -KILL "${p#/proc/}" 2>/dev/null || true
	fi
done
stop kube-apiserver
stop etcd

# 3. Mounts under the cluster dir (the kubelet bind-mounts its root and pod
#    volumes; containerd: overlay rootfs and shm), deepest first.
awk -v d="$D/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
done || true

# 4. iptables: kube-proxy's and the kubelet's KUBE-* chains, the egress rule.
[[ -x $D/bin/kube-proxy ]] && "$D/bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
for ipt in iptables ip6tables; do
	for table in filter nat mangle; do
		$ipt -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z-]+ .*-j KUBE-' | grep -vE '^-A KUBE-' |
			while read -r rule; do eval "$ipt -t $table ${rule/-A/-D}" 2>/dev/null || true; done || true
		for chain in $($ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
			$ipt -t "$table" -F "$chain" 2>/dev/null || true
		done
		for chain in $($ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
			$ipt -t "$table" -X "$chain" 2>/dev/null || true
		done
	done
done
while iptables -t mangle -D FORWARD -s "$EGRESS_CIDR" ! -d "$EGRESS_CIDR" -m comment --comment "$EGRESS_COMMENT" -j DROP 2>/dev/null; do :; done
# The bridge plugin's and portmap's own chains (CNI-*), made for our pods.
for table in filter nat; do
	iptables -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z-]+ .*-j CNI-' | grep -vE '^-A CNI-' |
		while read -r rule; do eval "iptables -t $table ${rule/-A/-D}" 2>/dev/null || true; done || true
	for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
		iptables -t "$table" -F "$chain" 2>/dev/null || true
	done
	for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
		iptables -t "$table" -X "$chain" 2>/dev/null || true
	done
done

# 5. Network: the bridge, and the netns made since up.sh (cni-*).
ip link del kbr0 2>/dev/null || true
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
	[[ $ns == cni-* ]] || continue
	if [[ -f $D/netns.before ]] && grep -qxF "$ns" "$D/netns.before"; then continue; fi
	ip netns del "$ns" 2>/dev/null || true
done
conntrack -D -s "$EGRESS_CIDR" >/dev/null 2>&1 || true

# 6. The pods' cgroups (the kubelet's kubepods tree in every hierarchy).
for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods.slice; do
	[[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done

# 7. Sysctls back to what they were before up.sh.
if [[ -f $D/sysctl.saved ]]; then
	while IFS='=' read -r k v; do sysctl -qw "$k=$v" 2>/dev/null || true; done <"$D/sysctl.saved"
fi

# 8. Files: logs' symlinks the kubelet made in /var/log/containers, the shim
#    sockets' dir if up.sh created it, then the cluster dir itself.
for l in /var/log/containers/*; do
	[[ -L $l && $(readlink "$l") == "$D/"* ]] && rm -f "$l"
done
# Host dirs the kubelet and containerd create whatever their config says
# (device-plugins, the CNI result cache, shim sockets): removed unless they
# were there before up.sh.
for d in /run/containerd /var/lib/kubelet /var/lib/cni; do
	[[ -f $D/existed${d//\//_} ]] || rm -rf "$d"
done
if [[ -n $(awk -v d="$D/" 'index($5, d) == 1' /proc/self/mountinfo) ]]; then
	die "mounts under $D remain; not removing it"
fi
rm -rf "$D"
log "down in $((SECONDS - t0)) s"
