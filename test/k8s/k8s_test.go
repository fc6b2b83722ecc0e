//go:build k8s

package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverLabels select forge's pods (the base kustomization's labels).
const serverLabels = `app.kubernetes.io/component: server
    app.kubernetes.io/name: forge
    app.kubernetes.io/part-of: forge`

// TestDevelopment applies deploy/kubernetes/overlays/development as
// shipped, waits for forge-0 to be Ready through its real probes, and then,
// on that one deployment: executes through the Service and straight to the
// pod, keeps a session (a variable and a file) across a pod deletion and a
// forced one, survives a containerd restart, and checks that a pod that is
// not Ready gets no traffic. Then it measures an execute through the
// Service, straight to the pod and on forge serve on this host.
func TestDevelopment(t *testing.T) {
	c := cluster(t)
	const ns = "forge"
	start := time.Now()
	c.applyOverlay(t, "deploy/kubernetes/overlays/development", ns, 1)
	p := c.waitReady(t, ns, "forge-0", "", 4*time.Minute)
	t.Logf("forge-0 Ready %v after apply (first start: image import and warm pool)", time.Since(start).Round(time.Millisecond))
	svc := Forge{Base: "http://" + net.JoinHostPort(c.serviceIP(t, ns, "forge"), "8080"), Host: "forge", Token: devToken}
	direct := func(p pod) Forge {
		return Forge{Base: "http://" + net.JoinHostPort(p.IP, "8080"), Host: "forge", Token: devToken}
	}

	t.Run("execute", func(t *testing.T) {
		svc.mustRun(t, "import sys; print(sys.version_info[0], 6 * 7)", "", "3 42\n")
		direct(p).mustRun(t, "print(sum(range(10)))", "", "45\n")
	})

	t.Run("session survives pod deletion", func(t *testing.T) {
		sid := svc.NewSession(t)
		svc.mustRun(t, "x = 41\nopen('/workspace/kept.txt', 'w').write('kept')\nprint('set')", sid, "set\n")
		for _, how := range [][]string{{"--wait=false"}, {"--grace-period=0", "--force"}} {
			old, err := c.pod(t, ns, "forge-0")
			if err != nil {
				t.Fatal(err)
			}
			c.K(t, append([]string{"-n", ns, "delete", "pod", "forge-0"}, how...)...)
			deleted := time.Now()
			p = c.waitReady(t, ns, "forge-0", old.UID, 3*time.Minute)
			// Until kube-proxy has the new pod's endpoint, a connection is
			// refused: a clear error a client retries. A wrong answer (the
			// session gone, x undefined) fails at once.
			var r ExecResult
			eventually(t, time.Minute, "the session's next call after delete "+strings.Join(how, " "), func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var err error
				r, err = svc.Execute(ctx, "x += 1\nprint(x, open('/workspace/kept.txt').read())", sid)
				var op *net.OpError
				if errors.As(err, &op) {
					return err
				}
				if err != nil || !r.Success || r.Stdout != "42 kept\n" {
					t.Fatalf("after delete %v: the session's next call got %+v, %v; want stdout %q", how, r, err, "42 kept\n")
				}
				return nil
			})
			t.Logf("delete %v: the session answered %v after the deletion", how, time.Since(deleted).Round(time.Millisecond))
			svc.mustRun(t, "x -= 1", sid, "")
		}
	})

	t.Run("containerd restart", func(t *testing.T) {
		before, err := c.pod(t, ns, "forge-0")
		if err != nil {
			t.Fatal(err)
		}
		c.Script(t, "restart-containerd.sh")
		restarted := time.Now()
		eventually(t, 2*time.Minute, "execute through the Service after the containerd restart", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := svc.Execute(ctx, "print('after')", "")
			if err == nil && r.Stdout != "after\n" {
				err = fmt.Errorf("got %+v", r)
			}
			return err
		})
		t.Logf("execute answered %v after containerd restarted", time.Since(restarted).Round(time.Millisecond))
		// The pod went on running: same pod, and the kubelet sees it Ready.
		after := c.waitReady(t, ns, "forge-0", "", time.Minute)
		if after.UID != before.UID || after.Restarts != before.Restarts {
			t.Errorf("containerd's restart replaced or restarted forge: before %+v, after %+v", before, after)
		}
	})

	t.Run("not-Ready pod gets no traffic", func(t *testing.T) {
		// A pod the Services select, with the http port, that never becomes
		// Ready (nothing listens): traffic sent to it would fail. A second
		// Service without client affinity makes every request choose again.
		applied := time.Now()
		c.Apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: forge-not-ready
  namespace: %s
  labels:
    %s
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  containers:
  - name: idle
    image: localhost/pause:3.10
    imagePullPolicy: Never
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: http}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: forge-spread, namespace: %s}
spec:
  selector: {app.kubernetes.io/component: server}
  ports: [{name: http, port: 8080, targetPort: http}]
`, ns, serverLabels, ns))
		defer c.K(t, "-n", ns, "delete", "pod/forge-not-ready", "service/forge-spread", "--wait=false")
		// The not-Ready pod is in both Services' endpoints, marked not ready.
		eventually(t, time.Minute, "forge-not-ready listed as a not-ready endpoint", func() error {
			for _, s := range []string{"forge", "forge-spread"} {
				ready, notReady, err := c.endpoints(ns, s)
				if err != nil {
					return err
				}
				if !slices.Contains(notReady, "forge-not-ready") || slices.Contains(ready, "forge-not-ready") || !slices.Contains(ready, "forge-0") {
					return fmt.Errorf("service %s: ready %v, not ready %v", s, ready, notReady)
				}
			}
			return nil
		})
		// And kube-proxy got the changes and has no sync pending: a request
		// then that met the not-Ready pod would be refused.
		eventually(t, time.Minute, "kube-proxy's rules synced after the endpoints changed", func() error {
			queued, synced, err := proxySynced()
			if err == nil && (queued.Before(applied) || synced.Before(queued)) {
				err = fmt.Errorf("last change queued %v, last sync %v, applied %v", queued, synced, applied)
			}
			return err
		})
		spread := Forge{Base: "http://" + net.JoinHostPort(c.serviceIP(t, ns, "forge-spread"), "8080"), Host: "forge", Token: devToken}
		for i := range 30 {
			target := spread
			if i%3 == 0 {
				target = svc
			}
			target.mustRun(t, fmt.Sprintf("print(%d)", i), "", fmt.Sprintf("%d\n", i))
		}
	})

	t.Run("figures", func(t *testing.T) {
		host := hostForge(t, c)
		figures(t, map[string]Forge{"service": svc, "pod": direct(p), "host": host})
	})
}

// endpoints: the pod names behind a Service, ready and not ready, from its
// EndpointSlices.
func (c *Cluster) endpoints(ns, svc string) (ready, notReady []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "", "-n", ns, "get", "endpointslices", "-l", "kubernetes.io/service-name="+svc, "-o", "json")
	if err != nil {
		return nil, nil, err
	}
	var list struct {
		Items []struct {
			Endpoints []struct {
				Conditions struct{ Ready *bool }
				TargetRef  *struct{ Name string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, nil, fmt.Errorf("decoding endpointslices: %w", err)
	}
	for _, it := range list.Items {
		for _, e := range it.Endpoints {
			if e.TargetRef == nil {
				continue
			}
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready = append(ready, e.TargetRef.Name)
			} else {
				notReady = append(notReady, e.TargetRef.Name)
			}
		}
	}
	return ready, notReady, nil
}

// hostForge starts bin/forge serve on 127.0.0.1 with the pods'
// configuration (deploy/kubernetes/base/forge.yaml, its own state dir), so
// the figures compare like with like.
func hostForge(t *testing.T, c *Cluster) Forge {
	t.Helper()
	bin := filepath.Join(c.Repo, "bin", "forge")
	cfg, err := os.ReadFile(filepath.Join(c.Repo, "deploy", "kubernetes", "base", "forge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	state := "/var/lib/forge-k8s-host"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := strings.Replace(string(cfg), "state_dir: /var/lib/forge", "state_dir: "+state, 1)
	s = strings.Replace(s, "http_addr: 0.0.0.0:8080", "http_addr: "+addr, 1)
	path := filepath.Join(t.TempDir(), "forge.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(devToken))
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	cmd := exec.Command(bin, "--config", path, "serve")
	cmd.Env = append(os.Environ(), "FORGE_ADMIN_TOKEN_SHA256="+hex.EncodeToString(sum[:]),
		"FORGE_IMAGES_PRELOAD=oci:"+filepath.Join(cache, "forge", "images", "forge_python_3.11"))
	logf, err := os.Create(filepath.Join(t.TempDir(), "forge.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	f := Forge{Base: "http://" + addr, Host: "127.0.0.1", Token: devToken}
	eventually(t, 2*time.Minute, "forge serve on the host Ready", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := f.do(ctx, "GET", "/readyz", nil)
		if err != nil {
			b, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("%w (log: %s)", err, lastLines(string(b), 5))
		}
		return nil
	})
	return f
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// figures: the median of sequential executes of print(1) (a new connection
// each, as a client through a Service makes) on each target, interleaved so
// that load on this shared machine hits them alike, and the ratios.
func figures(t *testing.T, targets map[string]Forge) {
	const runs = 40
	names := []string{"host", "pod", "service"}
	lat := map[string][]time.Duration{}
	for range 10 { // warm each path (the host's forge has just started)
		for _, n := range names {
			targets[n].mustRun(t, "print(1)", "", "1\n")
		}
	}
	// Paced below the tenant's 600 executions a minute (burst 20) on the pod,
	// which two of the three targets share, so no call waits for a 429.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range runs {
		<-tick.C
		for _, n := range names {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t0 := time.Now()
			r, err := targets[n].Execute(ctx, "print(1)", "")
			d := time.Since(t0)
			cancel()
			if err != nil || r.Stdout != "1\n" {
				t.Fatalf("%s: %+v %v", n, r, err)
			}
			lat[n] = append(lat[n], d)
		}
	}
	med := map[string]time.Duration{}
	for _, n := range names {
		slices.Sort(lat[n])
		med[n] = lat[n][runs/2]
	}
	h := float64(med["host"])
	t.Logf("k8s figures: execute print(1), median of %d: forge serve on the host %v, straight to the pod %v (%.2f x host), through the Service %v (%.2f x host, %.2f x pod)",
		runs, med["host"].Round(10*time.Microsecond), med["pod"].Round(10*time.Microsecond), float64(med["pod"])/h,
		med["service"].Round(10*time.Microsecond), float64(med["service"])/h, float64(med["service"])/float64(med["pod"]))
}

// proxySynced: when kube-proxy last queued a rules sync (a Service or
// endpoint change reached it) and when it last finished one, from its
// metrics on 127.0.0.1:10249.
func proxySynced() (queued, synced time.Time, err error) {
	resp, err := client.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		return queued, synced, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return queued, synced, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		for name, dst := range map[string]*time.Time{
			"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds": &queued,
			"kubeproxy_sync_proxy_rules_last_timestamp_seconds":        &synced,
		} {
			if v, ok := strings.CutPrefix(l, name+`{ip_family="IPv4"} `); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return queued, synced, fmt.Errorf("kube-proxy metric %q: %w", l, err)
				}
				*dst = time.Unix(0, int64(f*1e9))
			}
		}
	}
	if queued.IsZero() || synced.IsZero() {
		return queued, synced, errors.New("kube-proxy reports no rules sync timestamps")
	}
	return queued, synced, nil
}
