package egress_test

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// getLoop is Python that GETs url n times with urllib (through
// HTTP_PROXY when it is set) and prints the seconds the loop took.
const getLoop = `
import sys, time, urllib.request
url, n = %q, %d
t0 = time.perf_counter()
for _ in range(n):
    with urllib.request.urlopen(url, timeout=20) as r:
        r.read()
print(time.perf_counter() - t0)
`

// BenchmarkProxiedGET compares a plain-HTTP GET from a sandbox through
// its loopback forwarder and the host proxy with the same GET made
// directly on the host by the same Python, in the same run: it reports
// both per-GET times and their ratio (proxied / direct).
func BenchmarkProxiedGET(b *testing.B) {
	e := newEnv(b)
	e.setPolicy(b, fmt.Sprintf("127.0.0.1:%d", e.hp))
	url := fmt.Sprintf("http://127.0.0.1:%d/bench", e.hp)
	const n = 100
	var proxied, direct time.Duration
	for b.Loop() {
		proxied += secs(b, e.run(b, fmt.Sprintf(getLoop, url, n)))
		cmd := exec.Command("/usr/bin/python3", "-I", "-c", fmt.Sprintf(getLoop, url, n))
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy variables: a direct GET
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("host python: %v", err)
		}
		direct += secs(b, string(out))
	}
	gets := float64(b.N * n)
	b.ReportMetric(float64(proxied.Microseconds())/gets, "proxied-µs/get")
	b.ReportMetric(float64(direct.Microseconds())/gets, "direct-µs/get")
	b.ReportMetric(float64(proxied)/float64(direct), "proxied/direct")
}

func secs(b *testing.B, s string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		b.Fatalf("loop time %q: %v", s, err)
	}
	return time.Duration(f * float64(time.Second))
}
