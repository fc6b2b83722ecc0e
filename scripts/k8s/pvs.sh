#!/usr/bin/env bash
# pvs.sh COUNT: make sure COUNT unbound hostPath PersistentVolumes of the
# default class forge-k8s-local exist (the test cluster has no volume
# provisioner), each a fresh dir under $FORGE_K8S_DIR/pv. Released ones (their
# claim is gone) are deleted with their data first.
source "$(dirname "$0")/lib.sh"
want=${1:?usage: pvs.sh COUNT}
for pv in $(kubectl get pv -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
	kubectl delete pv "$pv" --wait=true >/dev/null
	rm -rf "${D:?}/pv/$pv"
done
have=$(kubectl get pv -o jsonpath='{range .items[?(@.status.phase=="Available")]}{.metadata.name}{"\n"}{end}' | grep -c . || true)
while ((have < want)); do
	name=forge-pv-$(date +%s%N | tail -c 10)
	mkdir -p "$D/pv/$name"
	kubectl apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: PersistentVolume
metadata: {name: $name}
spec:
  storageClassName: forge-k8s-local
  capacity: {storage: 200Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $D/pv/$name, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE]}]
EOF2
	have=$((have + 1))
done
