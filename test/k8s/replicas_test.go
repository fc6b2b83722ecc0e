//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharedDir is overlays/cluster's shared volume: a directory of the node
// (this host).
const sharedDir = "/var/lib/forge-shared"

// holder is the pod that holds session sid, from its record in the shared
// volume.
func holder(t testing.TB, sid string) string {
	t.Helper()
	return sessionMeta(t, sharedDir, sid).Member
}

// forgePid is the host pid of pod name's forge: the process that is pid 1
// of its pid namespace and has the pod's FORGE_CLUSTER_MEMBER (the node is
// this host).
func forgePid(t testing.TB, name string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		env, err := os.ReadFile(p + "/environ")
		if err != nil || !bytes.Contains(env, []byte("\x00FORGE_CLUSTER_MEMBER="+name+"\x00")) && !bytes.HasPrefix(env, []byte("FORGE_CLUSTER_MEMBER="+name+"\x00")) {
			continue
		}
		status, err := os.ReadFile(p + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "NSpid:" && f[2] == "1" { // not a sandbox in it (one namespace deeper)
				pid, _ := strconv.Atoi(f[1])
				return pid
			}
		}
	}
	t.Fatalf("no forge process of pod %s on this host", name)
	return 0
}

// retryConn runs a call until it does not fail to connect: until
// kube-proxy has a replaced pod's endpoint, a connection is refused, a
// clear error a client retries. Any other failure is the test's.
func retryConn(t *testing.T, what string, f func(ctx context.Context) (ExecResult, error)) ExecResult {
	t.Helper()
	var r ExecResult
	eventually(t, 2*time.Minute, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		r, err = f(ctx)
		var op *net.OpError
		if errors.As(err, &op) {
			return err
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return nil
	})
	return r
}

// TestReplicas is issue 29's points 2 and 3 on the real cluster: three
// replicas of overlays/cluster behind a Service without affinity; a
// session made through one pod is used through another and through the
// Service; the pod that holds it is deleted (gracefully, then by force)
// and the session answers with its variables and files; 3 -> 2 replicas
// keeps the removed pod's sessions; a rollout restart under eight clients
// for 60 s fails no call and loses no session.
func TestReplicas(t *testing.T) {
	c := cluster(t)
	const ns = "forge-cluster"
	t.Cleanup(func() { _ = os.RemoveAll(sharedDir) }) // after the namespace is gone (cleanups run last-in first-out)
	_ = os.RemoveAll(sharedDir)
	start := time.Now()
	c.applyOverlay(t, "deploy/kubernetes/overlays/cluster", ns, 3)
	pods := make([]pod, 3)
	for i := range pods {
		pods[i] = c.waitReady(t, ns, fmt.Sprintf("forge-%d", i), "", 6*time.Minute)
	}
	t.Logf("3 replicas Ready %v after apply", time.Since(start).Round(time.Millisecond))
	svc := Forge{Base: "http://" + net.JoinHostPort(c.serviceIP(t, ns, "forge"), "8080"), Host: "forge", Token: devToken}
	direct := func(p pod) Forge {
		return Forge{Base: "http://" + net.JoinHostPort(p.IP, "8080"), Host: "forge", Token: devToken}
	}

	sid := direct(pods[0]).NewSession(t)
	t.Run("any replica serves a session", func(t *testing.T) {
		direct(pods[0]).mustRun(t, "x = 41\nopen('/workspace/kept.txt', 'w').write('kept')\nprint('set')", sid, "set\n")
		direct(pods[1]).mustRun(t, "x += 1\nprint(x, open('/workspace/kept.txt').read())", sid, "42 kept\n")
		direct(pods[2]).mustRun(t, "print(x)", sid, "42\n")
		for range 6 {
			svc.mustRun(t, "print(x)", sid, "42\n")
		}
		if h := holder(t, sid); h != "forge-0" {
			t.Fatalf("holder after calls through every pod: got %q, want forge-0 (calls are forwarded to it)", h)
		}
	})

	t.Run("losing the holder keeps the session", func(t *testing.T) {
		// Deleted (kubectl waits until the pod is gone: it hibernated the
		// session and let go), then deleted by force (the pod object goes at
		// once; the kubelet stops forge within 2 s). A SIGKILL of forge
		// itself is TestClusterSessions' (test/stress): here it leaves the
		// pool's frozen sandboxes unkillable, and the pod Terminating, on
		// cgroup v1 (see docs/deploy.md).
		for i, how := range [][]string{{"--wait=true"}, {"--grace-period=0", "--force"}} {
			h := holder(t, sid)
			pid := forgePid(t, h)
			c.K(t, append([]string{"-n", ns, "delete", "pod", h}, how...)...)
			eventually(t, time.Minute, "the holder's forge process to end", func() error {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
					return fmt.Errorf("forge of %s (pid %d) still runs", h, pid)
				}
				return nil
			})
			gone := time.Now()
			r := retryConn(t, "the session's next call after "+strings.Join(how, " "), func(ctx context.Context) (ExecResult, error) {
				return svc.Execute(ctx, "x += 1\nprint(x, open('/workspace/kept.txt').read())", sid)
			})
			if want := fmt.Sprintf("%d kept\n", 43+i); !r.Success || r.Stdout != want {
				t.Fatalf("after %v of the holder: got %+v, want stdout %q", how, r, want)
			}
			t.Logf("%v of the holder %s: the session answered through the Service %v after its forge ended (now held by %s)",
				how, h, time.Since(gone).Round(time.Millisecond), holder(t, sid))
			for _, p := range []string{"forge-0", "forge-1", "forge-2"} {
				c.waitReady(t, ns, p, "", 4*time.Minute)
			}
		}
	})

	t.Run("scale 3 to 2", func(t *testing.T) {
		p2 := c.waitReady(t, ns, "forge-2", "", 4*time.Minute)
		var sids []string
		for i := range 3 {
			s := direct(p2).NewSession(t)
			direct(p2).mustRun(t, fmt.Sprintf("v = %d", i), s, "")
			if h := holder(t, s); h != "forge-2" {
				t.Fatalf("new session's holder: got %q, want forge-2", h)
			}
			sids = append(sids, s)
		}
		// The overlay's HPA holds the StatefulSet at 3 (min = max = 3): a
		// `kubectl scale` alone is undone at its next sync (15 s), so the
		// scale-down goes through the HPA, as it must for an operator.
		c.K(t, "-n", ns, "patch", "hpa", "forge", "--type=merge", "-p", `{"spec":{"minReplicas":2,"maxReplicas":2}}`)
		c.K(t, "-n", ns, "scale", "statefulset", "forge", "--replicas=2")
		eventually(t, 3*time.Minute, "forge-2 to go", func() error {
			if _, err := c.pod(t, ns, "forge-2"); err == nil {
				return fmt.Errorf("forge-2 still exists (StatefulSet replicas %s)",
					strings.TrimSpace(c.K(t, "-n", ns, "get", "statefulset", "forge", "-o", "jsonpath={.spec.replicas}")))
			}
			return nil
		})
		for i, s := range sids {
			r := retryConn(t, "a session of the removed pod", func(ctx context.Context) (ExecResult, error) { return svc.Execute(ctx, "print(v)", s) })
			if !r.Success || r.Stdout != fmt.Sprintf("%d\n", i) {
				t.Fatalf("session %s of the removed pod: got %+v, want stdout %d", s, r, i)
			}
		}
	})

	t.Run("rollout restart under load", func(t *testing.T) {
		const clients, within = 8, 60 * time.Second
		var mu sync.Mutex
		calls, failed := 0, 0
		var errs []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range clients {
			s := svc.NewSession(t)
			svc.mustRun(t, "n = 0", s, "")
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					r, err := svc.Execute(ctx, "n += 1\nprint(n)", s)
					cancel()
					mu.Lock()
					calls++
					if err != nil || !r.Success || r.Stdout != fmt.Sprintf("%d\n", n+1) {
						failed++
						if len(errs) < 10 {
							errs = append(errs, fmt.Sprintf("client %d: %+v %v (want %d)", i, r, err, n+1))
						}
					} else {
						n++
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(5 * time.Second) // load before the rollout (a pace, not a wait for a condition)
		began := time.Now()
		c.K(t, "-n", ns, "rollout", "restart", "statefulset", "forge")
		c.K(t, "-n", ns, "rollout", "status", "statefulset", "forge", "--timeout=5m")
		rolled := time.Since(began)
		if rest := within - time.Since(began) - 5*time.Second; rest > 0 {
			time.Sleep(rest)
		}
		close(stop)
		wg.Wait()
		t.Logf("rollout restart of 2 replicas (%v) under %d clients: %d calls, %d failed", rolled.Round(time.Second), clients, calls, failed)
		if failed > 0 {
			t.Fatalf("%d of %d calls failed during the rollout:\n%s", failed, calls, strings.Join(errs, "\n"))
		}
	})
}
