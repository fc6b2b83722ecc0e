#!/usr/bin/env bash
# up.sh (make k8s-up): a one-node Kubernetes v1.34.4 on this machine, all on
# loopback, with forge's image (build/oci/forge, from make oci) loaded.
# Idempotent: a running cluster is left as it is; a half-started one is torn
# down first. down.sh (make k8s-down) undoes everything.
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (containerd, the kubelet, iptables)"
for c in containerd runc iptables conntrack openssl curl /usr/lib/cni/bridge; do
	command -v "$c" >/dev/null || die "$c is missing: run scripts/install-deps.sh"
done

print_env() {
	cat >&2 <<EOT
k8s: cluster up ($K8S_VERSION, node $NODE, pods $POD_CIDR, services $SERVICE_CIDR, NodePorts on $NODEPORT_ADDR)
k8s: use it with
  export KUBECONFIG=$KUBECONFIG_FILE PATH=$D/bin:\$PATH
  kubectl get nodes
EOT
}

if alive etcd && alive kube-apiserver && alive containerd && alive kubelet && alive kube-proxy &&
	alive kube-controller-manager && alive kube-scheduler && [[ -x $D/bin/kubectl ]] &&
	kubectl get --raw /readyz >/dev/null 2>&1; then
	log "already up"
	[[ ${FORGE_K8S_SKIP_IMAGE:-} ]] || "$K8S_ROOT/scripts/k8s/load-image.sh"
	print_env
	exit 0
fi
if compgen -G "$D/pids/*.pid" >/dev/null; then
	log "a half-started cluster is there: tearing it down first"
	"$K8S_ROOT/scripts/k8s/down.sh"
fi
t0=$SECONDS
KBIN=$(kbin_path)
mkdir -p "$D"/{bin,pids,logs,pki,etcd,ctd/opt,cni/net.d,cni/ipam,kubelet,pod-logs,pv}
ln -sf "$KBIN" "$D/bin/kbin"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
	ln -sf "$KBIN" "$D/bin/$c"
done

# What down.sh must restore or must not touch: sysctls, netns that exist now.
if [[ ! -f $D/sysctl.saved ]]; then
	for k in "${SYSCTLS[@]}"; do
		v=$(sysctl -n "$k" 2>/dev/null) && printf '%s=%s\n' "$k" "$v"
	done >"$D/sysctl.saved.tmp"
	mv "$D/sysctl.saved.tmp" "$D/sysctl.saved"
	ip netns list | awk '{print $1}' >"$D/netns.before"
	for d in /run/containerd /var/lib/kubelet /var/lib/cni; do
		[[ -e $d ]] && touch "$D/existed${d//\//_}"
	done
fi

# PKI: a CA, the apiserver's serving cert, the service-account key pair and
# one static admin token every component and kubectl use.
pki=$D/pki
if [[ ! -f $pki/tokens.csv ]]; then
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=forge-k8s-ca" \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:198.19.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' >"$pki/san.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 30 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2>/dev/null
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	echo "$(openssl rand -hex 24),admin,admin,system:masters" >"$pki/tokens.csv"
fi
token=$(cut -d, -f1 "$pki/tokens.csv")
cat >"$KUBECONFIG_FILE" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: forge-k8s
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$pki/ca.crt"}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: forge-k8s
  context: {cluster: forge-k8s, user: admin}
current-context: forge-k8s
EOF2

# Pods resolve no names: no external nameserver reaches them.
printf '# forge test cluster: pods get no DNS\noptions ndots:1\n' >"$D/resolv.conf"

cat >"$D/ctd/config.toml" <<EOF2
version = 2
root = "$D/ctd/root"
state = "$D/ctd/state"
[grpc]
  address = "$CTD_SOCK"
[ttrpc]
  address = "$CTD_SOCK.ttrpc"
[debug]
  address = "$CTD_SOCK.debug"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/ctd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_REF"
  # No CAP_SYS_RESOURCE on some hosts (this one): a negative oom_score_adj
  # (pause's -998) cannot be set, and every sandbox would fail to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF2

cat >"$D/cni/net.d/10-bridge.conflist" <<EOF2
{"cniVersion": "0.4.0", "name": "kbr", "plugins": [
  {"type": "bridge", "bridge": "kbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$D/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "$EGRESS_CIDR"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF2

cat >"$D/kubelet.yaml" <<EOF2
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTD_SOCK
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: $D/resolv.conf
podLogsDir: $D/pod-logs
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
EOF2

# No pod traffic leaves the machine: anything from the pod range to outside
# the 198.18.0.0/15 block is dropped before the first pod exists.
iptables -t mangle -C FORWARD -s "$EGRESS_CIDR" ! -d "$EGRESS_CIDR" -m comment --comment "$EGRESS_COMMENT" -j DROP 2>/dev/null ||
	iptables -t mangle -I FORWARD -s "$EGRESS_CIDR" ! -d "$EGRESS_CIDR" -m comment --comment "$EGRESS_COMMENT" -j DROP

B=$D/bin
start etcd "$B/etcd" --name default --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:2379 \
	--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
	--initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380 \
	--listen-metrics-urls http://127.0.0.1:2381 --unsafe-no-fsync
start containerd containerd --config "$D/ctd/config.toml"
wait_for etcd 60 curl -sf http://127.0.0.1:2379/health
start kube-apiserver "$B/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 --secure-port=6443 \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
	--token-auth-file="$pki/tokens.csv" --authorization-mode=Node,RBAC --allow-privileged=true \
	--service-cluster-ip-range="$SERVICE_CIDR" --service-node-port-range=30000-32767 --endpoint-reconciler-type=none \
	--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$pki/sa.pub" \
	--service-account-signing-key-file="$pki/sa.key" --kubelet-preferred-address-types=Hostname
wait_for containerd 60 ctr version
"$K8S_ROOT/scripts/k8s/load-image.sh" pause
wait_for kube-apiserver 120 kubectl get --raw /readyz
start kube-controller-manager "$B/kube-controller-manager" --kubeconfig="$KUBECONFIG_FILE" --leader-elect=false \
	--bind-address=127.0.0.1 --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
	--use-service-account-credentials=false
start kube-scheduler "$B/kube-scheduler" --kubeconfig="$KUBECONFIG_FILE" --leader-elect=false --bind-address=127.0.0.1
start kubelet "$B/kubelet" --kubeconfig="$KUBECONFIG_FILE" --config="$D/kubelet.yaml" --root-dir="$D/kubelet" \
	--hostname-override="$NODE" --cert-dir="$D/kubelet/pki"
start kube-proxy "$B/kube-proxy" --kubeconfig="$KUBECONFIG_FILE" --proxy-mode=iptables --cluster-cidr="$POD_CIDR" \
	--nodeport-addresses="$NODEPORT_ADDR/32" --bind-address=127.0.0.1 --metrics-bind-address=127.0.0.1:10249 \
	--healthz-bind-address=127.0.0.1:10256 --hostname-override="$NODE" --conntrack-max-per-core=0 \
	--conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0
[[ ${FORGE_K8S_SKIP_IMAGE:-} ]] || "$K8S_ROOT/scripts/k8s/load-image.sh"
wait_for "node $NODE Ready" 120 kubectl wait --for=condition=Ready "node/$NODE" --timeout=1s
# PVCs bind to hostPath PVs that pvs.sh makes, through this default class.
kubectl apply -f - >/dev/null <<EOF2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: forge-k8s-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF2
wait_for "the default ServiceAccount" 60 kubectl -n default get serviceaccount default
log "up in $((SECONDS - t0)) s"
print_env
