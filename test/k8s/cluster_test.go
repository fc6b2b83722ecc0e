//go:build k8s

// Package k8s runs forge's Kubernetes manifests on a real one-node cluster
// that scripts/k8s/up.sh started (make test-k8s): upstream Kubernetes
// v1.34.4 (kbin), containerd, runc and the CNI bridge on this machine; no
// fake API server, no mocked kubelet. The build tag keeps `go test ./...`
// from running it without a cluster.
//
// To add a test: use cluster(t) for kubectl, applyOverlay to deploy an
// overlay (it removes what it made when the test ends), and the forge
// helpers (execute, newSession) against a pod's IP or the Service's
// ClusterIP, both reachable from the host through kbr0 and kube-proxy.
package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// devToken is the development overlay's token (its SHA-256 is in the
// overlay's Secret).
const devToken = "forge-dev-token"

// Cluster is the cluster up.sh started: its dir, kubectl and the repo root.
type Cluster struct {
	Dir, Kubectl, Kubeconfig, Repo string
}

// cluster finds the running cluster; without one the test fails (it never
// skips: make test-k8s starts the cluster first).
func cluster(t testing.TB) *Cluster {
	t.Helper()
	dir := os.Getenv("FORGE_K8S_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		dir = filepath.Join(cache, "forge", "k8s", "cluster")
	}
	c := &Cluster{Dir: dir, Kubectl: filepath.Join(dir, "bin", "kubectl"), Kubeconfig: filepath.Join(dir, "kubeconfig")}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Fatalf("no cluster: %v (start one with make k8s-up, or run make test-k8s)", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c.Repo = filepath.Clean(filepath.Join(wd, "..", ".."))
	return c
}

// Run runs kubectl and returns its stdout; stderr goes into the error.
func (c *Cluster) Run(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = c.Repo
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// K runs kubectl and fails the test on an error.
func (c *Cluster) K(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := c.Run(ctx, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Apply applies YAML from a string.
func (c *Cluster) Apply(t testing.TB, yaml string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Run(ctx, yaml, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// Script runs one of scripts/k8s (pvs.sh, restart-containerd.sh, ...).
func (c *Cluster) Script(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Repo, "scripts", "k8s", name), args...)
	cmd.Env = append(os.Environ(), "FORGE_K8S_DIR="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/k8s/%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyOverlay applies a kustomization (a path relative to the repo) after
// making count hostPath PVs for its claims; when the test ends, the
// namespace, its claims and the PVs go. It returns the namespace.
func (c *Cluster) applyOverlay(t *testing.T, dir, namespace string, pvs int) {
	t.Helper()
	c.Script(t, "pvs.sh", fmt.Sprint(pvs))
	t.Cleanup(func() { c.deleteNamespace(t, namespace) })
	c.K(t, "apply", "-k", dir)
}

func (c *Cluster) deleteNamespace(t testing.TB, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The workloads first, waiting for their pods to end: a namespace
	// deleted while pods still terminate is requeued by the namespace
	// controller after their grace period (forge's: 600 s), so the rest of
	// its content would wait that long.
	if _, err := c.Run(ctx, "", "delete", "statefulsets,deployments,pods", "--all", "-n", ns, "--ignore-not-found",
		"--cascade=foreground", "--wait=true", "--timeout=120s"); err != nil {
		t.Errorf("deleting the workloads of namespace %s: %v", ns, err)
	}
	if _, err := c.Run(ctx, "", "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=150s"); err != nil {
		// What is left, and why: the namespace's conditions name what
		// it waits for; a pod's last lines say what its forge was doing.
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		left, _ := c.Run(dctx, "", "get", "pods,pvc", "-n", ns, "-o", "wide")
		conds, _ := c.Run(dctx, "", "get", "namespace", ns, "-o", "jsonpath={.status.conditions}")
		logs, _ := c.Run(dctx, "", "logs", "-n", ns, "--all-containers", "--prefix", "--tail=15", "-l", "app.kubernetes.io/name=forge")
		t.Errorf("deleting namespace %s: %v\nleft:\n%s\nconditions: %s\nlogs:\n%s", ns, err, left, conds, logs)
	}
}

// pod is what the tests need of a pod.
type pod struct {
	Name, UID, IP string
	Ready         bool
	Restarts      int
}

func (c *Cluster) pod(t testing.TB, ns, name string) (pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "", "-n", ns, "get", "pod", name, "-o", "json")
	if err != nil {
		return pod{}, err
	}
	var p struct {
		Metadata struct{ Name, UID string }
		Status   struct {
			PodIP             string
			Conditions        []struct{ Type, Status string }
			ContainerStatuses []struct{ RestartCount int }
		}
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return pod{}, fmt.Errorf("decoding pod %s: %w", name, err)
	}
	r := pod{Name: p.Metadata.Name, UID: p.Metadata.UID, IP: p.Status.PodIP}
	for _, cond := range p.Status.Conditions {
		r.Ready = r.Ready || (cond.Type == "Ready" && cond.Status == "True")
	}
	for _, cs := range p.Status.ContainerStatuses {
		r.Restarts += cs.RestartCount
	}
	return r, nil
}

// waitReady polls until pod name is Ready (through its real probes) and,
// when notUID is set, is a new pod (another UID). It fails with the pod's
// description and forge's log on the deadline.
func (c *Cluster) waitReady(t testing.TB, ns, name, notUID string, within time.Duration) pod {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p, err := c.pod(t, ns, name)
		if err == nil && p.Ready && p.IP != "" && (notUID == "" || p.UID != notUID) {
			return p
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			desc, _ := c.Run(ctx, "", "-n", ns, "describe", "pod", name)
			logs, _ := c.Run(ctx, "", "-n", ns, "logs", name, "--tail=40")
			t.Fatalf("pod %s/%s not Ready within %v (last: %+v, %v)\n%s\n--- logs\n%s", ns, name, within, p, err, desc, logs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// serviceIP is a Service's ClusterIP: the host reaches it through
// kube-proxy's rules, exactly as a pod would.
func (c *Cluster) serviceIP(t testing.TB, ns, name string) string {
	return strings.TrimSpace(c.K(t, "-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}"))
}

// Forge is a forge REST endpoint: a base URL, the Host header its
// allowed_hosts accepts, and a token.
type Forge struct {
	Base, Host, Token string
}

// ExecResult is the part of forge's ExecutionResult the tests read.
type ExecResult struct {
	Success   bool     `json:"success"`
	Stdout    string   `json:"stdout"`
	Stderr    string   `json:"stderr"`
	SessionID string   `json:"session_id"`
	Notes     []string `json:"notes"`
	Error     *struct {
		Type, Message string
	} `json:"error"`
}

var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// do sends one request; a non-2xx answer is an error naming the status
// and body. A 429 (the tenant's executions_per_minute, per replica) is
// retried after its Retry-After, as a well-behaved client does.
func (f Forge) do(ctx context.Context, method, path string, body any) ([]byte, int, error) {
	for {
		b, code, retry, err := f.once(ctx, method, path, body)
		if code != http.StatusTooManyRequests {
			return b, code, err
		}
		select {
		case <-ctx.Done():
			return b, code, fmt.Errorf("%w (still throttled: %w)", err, ctx.Err())
		case <-time.After(retry):
		}
	}
}

func (f Forge) once(ctx context.Context, method, path string, body any) ([]byte, int, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.Base+path, rd)
	if err != nil {
		return nil, 0, 0, err
	}
	req.Host = f.Host
	req.Header.Set("Authorization", "Bearer "+f.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%s %s%s: %w", method, f.Base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, 0, err
	}
	if resp.StatusCode/100 != 2 {
		retry := 200 * time.Millisecond
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retry = time.Duration(min(s, 10)) * time.Second
		}
		return b, resp.StatusCode, retry, fmt.Errorf("%s %s%s: %s: %s", method, f.Base, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, resp.StatusCode, 0, nil
}

// Execute is POST /api/v1/execute (in session sid when not empty).
func (f Forge) Execute(ctx context.Context, code, sid string) (ExecResult, error) {
	body := map[string]any{"code": code}
	if sid != "" {
		body["session_id"] = sid
	}
	b, _, err := f.do(ctx, http.MethodPost, "/api/v1/execute", body)
	if err != nil {
		return ExecResult{}, err
	}
	var r ExecResult
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", b, err)
	}
	return r, nil
}

// mustRun executes code and fails unless it succeeded with stdout want.
func (f Forge) mustRun(t testing.TB, code, sid, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := f.Execute(ctx, code, sid)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Success || r.Stdout != want {
		t.Fatalf("%s: got success=%v stdout %q stderr %q error %+v, want stdout %q", f.Base, r.Success, r.Stdout, r.Stderr, r.Error, want)
	}
}

// NewSession is POST /api/v1/sandboxes.
func (f Forge) NewSession(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, _, err := f.do(ctx, http.MethodPost, "/api/v1/sandboxes", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ ID string }
	if err := json.Unmarshal(b, &ref); err != nil || ref.ID == "" {
		t.Fatalf("POST /api/v1/sandboxes: %s (%v)", b, err)
	}
	return ref.ID
}

// eventually polls fn until it returns nil or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, within, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
