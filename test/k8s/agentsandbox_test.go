//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentSandboxNS is the namespace of TestAgentSandbox's template, pool and
// claims.
const agentSandboxNS = "forge-agent-sandbox"

// agentSandboxObjects is a SandboxTemplate whose pod runs forge with its
// agent-sandbox face on (one forge session per pod; the token's SHA-256 in
// the ConfigMap), and a SandboxWarmPool of two such pods. %[1]s is the
// token's SHA-256.
const agentSandboxObjects = `
apiVersion: v1
kind: Namespace
metadata: {name: forge-agent-sandbox}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: forge-agent-sandbox, namespace: forge-agent-sandbox}
data:
  forge.yaml: |
    state_dir: /var/lib/forge
    server:
      transport: http
      http_addr: 0.0.0.0:8080
      allowed_hosts: ["${POD_IP}"]
      auth:
        tokens:
          - {tenant: agent, scopes: [execute, sessions], sha256: %[1]s}
    limits: {memory: 2g}
    pool: {size: 1}
    agent_sandbox: {enabled: true}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: forge, namespace: forge-agent-sandbox}
spec:
  # The bridge CNI here enforces no NetworkPolicy; forge's token guards the API.
  networkPolicyManagement: Unmanaged
  podTemplate:
    metadata:
      labels: {app: forge-agent-sandbox}
    spec:
      automountServiceAccountToken: false
      containers:
        - name: forge
          image: localhost/forge:latest
          imagePullPolicy: IfNotPresent
          args: ["--config", "/etc/forge/forge.yaml", "serve", "--allow-remote"]
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
          ports: [{name: http, containerPort: 8080}]
          readinessProbe:
            httpGet: {path: /readyz, port: 8080, httpHeaders: [{name: Host, value: localhost}]}
            periodSeconds: 1
            failureThreshold: 3
          resources:
            limits: {memory: 3Gi}
          securityContext: {privileged: true, readOnlyRootFilesystem: true}
          volumeMounts:
            - {name: state, mountPath: /var/lib/forge}
            - {name: config, mountPath: /etc/forge, readOnly: true}
            - {name: tmp, mountPath: /tmp}
      volumes:
        - {name: state, emptyDir: {}}
        - {name: tmp, emptyDir: {}}
        - name: config
          configMap: {name: forge-agent-sandbox}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: forge-pool, namespace: forge-agent-sandbox}
spec:
  replicas: 2
  sandboxTemplateRef: {name: forge}
`

// claimReport is what test/agentsandbox/cluster_claim.py prints.
type claimReport struct {
	ClaimReadyMS  float64 `json:"claim_ready_ms"`
	FirstResultMS float64 `json:"first_result_ms"`
	NextRunMS     float64 `json:"next_run_ms"`
	PodIP         string  `json:"pod_ip"`
	Sandbox       string  `json:"sandbox"`
	First, CSV    struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	}
	ReadBack string   `json:"read_back"`
	Listing  []string `json:"listing"`
	Exists   bool     `json:"exists"`
	Inside   string   `json:"inside"`
}

// TestAgentSandbox runs kubernetes-sigs/agent-sandbox v1.0.1's real
// controller (built from the Go module proxy, run on this host with the
// cluster's kubeconfig) with its CRDs, a SandboxTemplate whose pod is forge
// and a SandboxWarmPool, and the official Python client k8s-agent-sandbox
// 1.0.8, unchanged: it claims a pod from the warm pool, runs commands and
// moves files in it through forge's agent-sandbox face, twice (the second
// claim after the pool refilled). It reports a claim from the warm pool to
// the first result.
func TestAgentSandbox(t *testing.T) {
	c := cluster(t)
	ctrlBin := agentSandboxScript(t, c, "bin")
	crds := agentSandboxScript(t, c, "crds")
	c.K(t, "apply", "--server-side", "-f", crds)
	c.K(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/sandboxes.agents.x-k8s.io",
		"crd/sandboxtemplates.extensions.agents.x-k8s.io", "crd/sandboxclaims.extensions.agents.x-k8s.io",
		"crd/sandboxwarmpools.extensions.agents.x-k8s.io")

	ctx, stop := context.WithCancel(context.Background())
	ctrl := exec.CommandContext(ctx, ctrlBin, "--extensions", "--leader-elect=false",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0")
	ctrl.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	var ctrlLog bytes.Buffer
	ctrl.Stdout, ctrl.Stderr = &ctrlLog, &ctrlLog
	if err := ctrl.Start(); err != nil {
		t.Fatalf("starting the agent-sandbox controller: %v", err)
	}
	t.Cleanup(func() {
		stop()
		_ = ctrl.Wait()
		if t.Failed() {
			var keep []string
			for _, l := range strings.Split(lastLines(ctrlLog.String(), 30), "\n") {
				keep = append(keep, l[:min(len(l), 400)])
			}
			t.Logf("controller log (last lines, cut at 400 bytes):\n%s", strings.Join(keep, "\n"))
		}
	})

	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		t.Fatal(err)
	}
	token := "forge_as_" + hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))
	t.Cleanup(func() {
		// The pool first, so the controller is still there to let its
		// sandboxes go; then the namespace.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.Run(cctx, "", "-n", agentSandboxNS, "delete", "sandboxwarmpool", "--all", "--wait=true")
		c.deleteNamespace(t, agentSandboxNS)
	})
	applied := time.Now()
	c.Apply(t, fmt.Sprintf(agentSandboxObjects, hex.EncodeToString(sum[:])))
	waitPool := func(what string) {
		eventually(t, 4*time.Minute, what, func() error {
			out, err := c.Run(context.Background(), "", "-n", agentSandboxNS, "get", "sandboxwarmpool", "forge-pool", "-o", "jsonpath={.status.readyReplicas}")
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != "2" {
				return fmt.Errorf("readyReplicas %q, want 2", out)
			}
			return nil
		})
	}
	waitPool("the warm pool's two forge pods Ready")
	t.Logf("warm pool of 2 forge pods Ready %v after apply", time.Since(applied).Round(time.Millisecond))

	venv := strings.TrimSpace(run(t, c, filepath.Join(c.Repo, "scripts", "test-agentsandbox.sh"), "--venv"))
	for i := 1; i <= 2; i++ {
		if i == 2 {
			waitPool("the warm pool refilled after the first claim")
		}
		out := run(t, c, filepath.Join(venv, "bin", "python"), filepath.Join(c.Repo, "test", "agentsandbox", "cluster_claim.py"), agentSandboxNS, "forge-pool", token)
		var r claimReport
		if err := json.Unmarshal([]byte(lastLines(out, 1)), &r); err != nil {
			t.Fatalf("claim %d: the client's report: %v\n%s", i, err, out)
		}
		switch {
		case r.First.Stdout != "42\n" || r.First.ExitCode != 0:
			t.Errorf("claim %d: first command got %+v, want stdout 42", i, r.First)
		case r.CSV.Stdout != "6\n":
			t.Errorf("claim %d: the command reading the uploaded file got %+v, want 6", i, r.CSV)
		case r.ReadBack != "from the sandbox" || !r.Exists || strings.Join(r.Listing, ",") != "in.csv,out.txt":
			t.Errorf("claim %d: files: read back %q, exists %v, listing %v", i, r.ReadBack, r.Exists, r.Listing)
		case !strings.HasSuffix(r.Inside, "['lo']") || strings.HasPrefix(r.Inside, "0 "):
			t.Errorf("claim %d: inside the sandbox: %q, want a non-root uid and only lo", i, r.Inside)
		}
		t.Logf("claim %d (pod %s, %s): claim Ready from the warm pool %.0f ms, first result %.0f ms after the claim was made; a later command %.1f ms",
			i, r.Sandbox, r.PodIP, r.ClaimReadyMS, r.FirstResultMS, r.NextRunMS)
	}

	t.Run("template whose image is missing", func(t *testing.T) {
		c.Apply(t, missingImageObjects)
		out := run(t, c, filepath.Join(venv, "bin", "python"), filepath.Join(c.Repo, "test", "agentsandbox", "cluster_claim.py"), agentSandboxNS, "forge-missing", "--expect-failure")
		var r struct {
			Error     *string `json:"error"`
			ElapsedMS float64 `json:"elapsed_ms"`
		}
		if err := json.Unmarshal([]byte(lastLines(out, 1)), &r); err != nil {
			t.Fatalf("the client's report: %v\n%s", err, out)
		}
		if r.Error == nil {
			t.Fatalf("a claim on a template whose image is missing succeeded")
		}
		t.Logf("the client raised after %.0f ms: %s", r.ElapsedMS, *r.Error)
		// The client deleted its claim; no claim is left behind.
		eventually(t, time.Minute, "no SandboxClaim left", func() error {
			out, err := c.Run(context.Background(), "", "-n", agentSandboxNS, "get", "sandboxclaims", "-o", "name")
			if err != nil || strings.TrimSpace(out) != "" {
				return fmt.Errorf("claims %q, %v", out, err)
			}
			return nil
		})
	})
}

// missingImageObjects is a template whose image no node has (pulls are
// never possible here) and its warm pool.
const missingImageObjects = `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: forge-missing, namespace: forge-agent-sandbox}
spec:
  networkPolicyManagement: Unmanaged
  podTemplate:
    spec:
      automountServiceAccountToken: false
      containers:
        - name: forge
          image: localhost/forge:no-such-tag
          imagePullPolicy: IfNotPresent
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: forge-missing, namespace: forge-agent-sandbox}
spec:
  replicas: 1
  sandboxTemplateRef: {name: forge-missing}
`

// agentSandboxScript runs scripts/k8s/agent-sandbox.sh and returns its
// stdout's last line (its progress goes to stderr).
func agentSandboxScript(t *testing.T, c *Cluster, what string) string {
	t.Helper()
	return strings.TrimSpace(lastLines(run(t, c, filepath.Join(c.Repo, "scripts", "k8s", "agent-sandbox.sh"), what), 1))
}

// run runs a program with the cluster's kubeconfig and returns its stdout;
// it fails the test with stderr on an error.
func run(t *testing.T, c *Cluster, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.Repo
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+filepath.Dir(c.Kubectl)+":"+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, lastLines(errb.String(), 40))
	}
	return out.String()
}
