//go:build k8s

package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"testing"
	"time"
)

// serviceMonitorCRD stands in for the Prometheus Operator's CRD, which the
// production overlay's ServiceMonitor needs (a cluster without it refuses
// the apply: "no matches for kind ServiceMonitor").
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

// TestProduction applies deploy/kubernetes/overlays/production (through
// test/k8s/overlays/production: this node's image, a smaller CPU request)
// with the Secrets its comment tells operators to create: three pods become
// Ready through the real probes, each runs code straight to it, and so does
// the Service.
func TestProduction(t *testing.T) {
	c := cluster(t)
	const ns, token = "forge", "forge-production-test-token"
	c.Apply(t, serviceMonitorCRD)
	eventually(t, time.Minute, "the ServiceMonitor CRD established", func() error {
		_, err := c.Run(t.Context(), "", "get", "servicemonitors", "-A")
		return err
	})
	sum := sha256.Sum256([]byte(token))
	c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: forge-tokens, namespace: %[1]s}
stringData: {admin-sha256: %[2]s}
---
apiVersion: v1
kind: Secret
metadata: {name: forge-metrics-token, namespace: %[1]s}
stringData: {token: %[3]s}
`, ns, hex.EncodeToString(sum[:]), token))
	start := time.Now()
	c.applyOverlay(t, "test/k8s/overlays/production", ns, 3)
	for i := range 3 {
		p := c.waitReady(t, ns, fmt.Sprintf("forge-%d", i), "", 5*time.Minute)
		f := Forge{Base: "http://" + net.JoinHostPort(p.IP, "8080"), Host: "forge", Token: token}
		f.mustRun(t, fmt.Sprintf("print('pod', %d)", i), "", fmt.Sprintf("pod %d\n", i))
	}
	t.Logf("3 pods Ready and answering %v after apply", time.Since(start).Round(time.Millisecond))
	svc := Forge{Base: "http://" + net.JoinHostPort(c.serviceIP(t, ns, "forge"), "8080"), Host: "forge", Token: token}
	svc.mustRun(t, "print(2 ** 10)", "", "1024\n")
	if out := c.K(t, "-n", ns, "get", "servicemonitor", "forge", "-o", "name"); out == "" {
		t.Error("the ServiceMonitor was not created")
	}
}
