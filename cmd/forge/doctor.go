package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mcp-forge/forge/cgroups"
	"github.com/mcp-forge/forge/internal/rootless"
	"github.com/mcp-forge/forge/profiles"
	"github.com/mcp-forge/forge/rootfs"
	"github.com/mcp-forge/forge/runtime/build"
	"github.com/mcp-forge/forge/runtime/idmap"
	"github.com/mcp-forge/forge/runtime/kernel"
	"github.com/mcp-forge/forge/runtime/sandbox"
	"github.com/mcp-forge/forge/seccomp"
)

// check is one host feature forge depends on.
type check struct {
	Name     string `json:"name"`
	Found    bool   `json:"found"`
	Detail   string `json:"detail,omitempty"`
	Disables string `json:"disables,omitempty"` // what does not work without it
}

func hostChecks() []check {
	var cs []check
	for _, ns := range []struct{ name, disables string }{
		{"mnt", "all sandboxes (mount namespace)"},
		{"pid", "all sandboxes (pid namespace)"},
		{"ipc", "all sandboxes (ipc namespace)"},
		{"uts", "all sandboxes (uts namespace)"},
		{"net", "all sandboxes (network isolation)"},
		{"cgroup", "all sandboxes (cgroup namespace)"},
		{"user", "all sandboxes (container root must map to an unprivileged host uid)"},
	} {
		_, err := os.Stat("/proc/self/ns/" + ns.name)
		cs = append(cs, check{Name: "namespace " + ns.name, Found: err == nil, Disables: ns.disables})
	}
	maxUserNS := strings.TrimSpace(readFile("/proc/sys/user/max_user_namespaces"))
	cs = append(cs, check{Name: "user namespaces allowed", Found: maxUserNS != "" && maxUserNS != "0",
		Detail: "max_user_namespaces=" + maxUserNS, Disables: "all sandboxes"})

	v, verr := cgroups.Version()
	ctrls, _ := cgroups.Controllers()
	detail := fmt.Sprintf("cgroup v%d, controllers: %s", v, strings.Join(ctrls, " "))
	if verr != nil {
		detail = verr.Error()
	}
	if rootless.Active() {
		detail += " (the host's; a rootless forge uses them only in a delegated subtree: see the rootless limit rows)"
	}
	cs = append(cs, check{Name: "cgroups", Found: verr == nil, Detail: detail, Disables: "all sandboxes (memory, CPU and pids limits)"})
	for _, c := range []struct{ name, disables string }{
		{"memory", "all sandboxes (memory limit, OOM detection)"},
		{"pids", "all sandboxes (fork-bomb protection)"},
		{"cpu", "all sandboxes (CPU limit)"},
		{"freezer", "the warm pool and idle sessions (pause/resume)"},
	} {
		found := false
		for _, have := range ctrls {
			found = found || have == c.name
		}
		if v == 2 && c.name == "freezer" {
			found = true // cgroup v2 has cgroup.freeze in every cgroup
		}
		cs = append(cs, check{Name: "cgroup controller " + c.name, Found: found, Disables: c.disables})
	}
	actions := strings.TrimSpace(readFile("/proc/sys/kernel/seccomp/actions_avail"))
	cs = append(cs, check{Name: "seccomp (kernel)", Found: actions != "", Detail: actions, Disables: "all sandboxes (forge refuses to run unfiltered)"})
	cs = append(cs, check{Name: "seccomp (this build)", Found: seccomp.Enabled,
		Detail:   map[bool]string{true: "built with -tags seccomp", false: "built without -tags seccomp"}[seccomp.Enabled],
		Disables: "all sandboxes (forge refuses to run unfiltered)"})
	slim := sandbox.SlimInit()
	cs = append(cs, check{Name: "slim sandbox init (build)", Found: slim != nil,
		Detail:   map[bool]string{true: fmt.Sprintf("%.1f MB, embedded by make build", float64(len(slim))/1e6), false: "built without it: forge itself is each sandbox's init"}[slim != nil],
		Disables: "~5 ms less per sandbox start (nothing else)"})
	cs = append(cs, check{Name: "static pid-1 reaper (build)", Found: kernel.Reaper() != nil,
		Disables: "a static reaper (a minimal Python reaps instead, ~2 MB more per sandbox)"})
	fsys := readFile("/proc/filesystems")
	cs = append(cs, check{Name: "overlayfs", Found: strings.Contains(fsys, "overlay"), Disables: "the image store and shared read-only rootfs"})
	cs = append(cs, check{Name: "tmpfs", Found: strings.Contains(fsys, "tmpfs"), Disables: "/tmp and /workspace inside sandboxes"})
	_, err := os.Stat("/usr/sbin/debootstrap")
	cs = append(cs, check{Name: "debootstrap", Found: err == nil, Disables: "`forge image bootstrap` (pull or import an image instead)"})
	if rootless.Active() {
		cs = append(cs, check{Name: "mode", Found: true, Detail: fmt.Sprintf("rootless: uid %d, as root of a user namespace of its own", rootless.UID())})
	} else {
		cs = append(cs, check{Name: "mode", Found: os.Geteuid() == 0, Detail: fmt.Sprintf("root (euid %d)", os.Geteuid()),
			Disables: "all sandboxes (an ordinary user's forge runs rootless: see the rootless checks)"})
	}
	return cs
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// idRangeCheck reports whether the host id range reserved for sandboxes is
// clear of the subordinate ranges and accounts of etcDir.
func idRangeCheck(cfg *profiles.Config, etcDir string) check {
	if rootless.Active() {
		return rootlessIDCheck(cfg)
	}
	s := cfg.Security
	r := idmap.Range{Start: s.UIDRangeStart, Size: s.UIDRangeSize}
	c := check{Name: "reserved host id range", Found: true,
		Detail: fmt.Sprintf("%s (%s), %d sandboxes of %d ids: clear of %s/subuid, %s/subgid and host accounts",
			r, idmap.Settings, s.UIDRangeSize/max(s.UIDMapSize, 1), s.UIDMapSize, etcDir, etcDir),
		Disables: "all sandboxes (forge refuses to start)"}
	if err := idmap.CheckHost(r, etcDir); err != nil {
		c.Found = false
		c.Detail = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return c
}

// modeCheck says which sandbox mode runs and why.
func modeCheck(cfg *profiles.Config) check {
	c := check{Name: "sandbox mode", Found: true, Disables: "zygote mode (sandboxes start as containers)"}
	switch cfg.Sandbox.Mode {
	case string(sandbox.ModeZygote):
		tools, how := cfg.Sandbox.ZygoteToolTemplates, "sandbox.zygote_tool_templates"
		if tools == 0 {
			tools = sandbox.BindsTemplatesFor(idmap.Range{Start: cfg.Security.UIDRangeStart, Size: cfg.Security.UIDRangeSize},
				cfg.Security.UIDMapSize, cfg.Sandbox.ZygoteSlots)
			how += " 0: derived from the host uid range"
		}
		c.Detail = fmt.Sprintf("zygote (sandbox.mode, the default): each sandbox is forked from a warm template of its image, "+
			"recycled after %d forks or %s; hosted tool calls fork from templates of their tools module (at most %d modules at once, %s); "+
			"sandboxed MCP servers and builds start as containers",
			cfg.Sandbox.ZygoteForks, cfg.Sandbox.ZygoteMaxAge, tools, how)
		n := strings.TrimSpace(readFile("/proc/sys/user/max_user_namespaces"))
		if n == "" || n == "0" {
			c.Found = false
			c.Detail += "; but the kernel allows no user namespaces (max_user_namespaces=" + n + "), which each child needs"
		}
		if kernel.ZFork() == nil {
			c.Found = false
			c.Detail += "; but this forge was built without the zygote helper (zfork.so, which makes every child): " +
				"no template starts and every sandbox starts as a container; build forge with `make build`"
		}
		if rootless.Active() {
			rootlessZygoteCheck(cfg, &c)
		}
	default:
		c.Detail = "container (sandbox.mode): one libcontainer container per sandbox (zygote, the default, forks each from a warm template)"
	}
	return c
}

func cmdDoctor(_ context.Context, g *globals, args []string) error {
	asJSON := len(args) == 1 && args[0] == "--json"
	if len(args) > 0 && !asJSON {
		return usagef("doctor: takes only --json")
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	cs := append(append(hostChecks(), idRangeCheck(cfg, "/etc"), modeCheck(cfg)), append(limitChecks(cfg), densityCheck(cfg))...)
	missing := 0
	for _, c := range cs {
		if !c.Found {
			missing++
		}
	}
	if asJSON {
		if err := json.NewEncoder(g.stdout).Encode(cs); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FEATURE\tSTATUS\tDETAIL")
		for _, c := range cs {
			status, detail := "found", c.Detail
			if !c.Found {
				status = "MISSING"
				detail = strings.TrimSpace(detail + " — disables " + c.Disables)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, status, detail)
		}
		tw.Flush()
	}
	if missing > 0 {
		return exitError{code: exitInfra, err: fmt.Errorf("doctor: %d feature(s) missing", missing)}
	}
	return nil
}

func cmdGC(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		return usagef("gc: takes no arguments")
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return err
	}
	// Opening the runtime and the store runs their recovery: sandboxes,
	// cgroups, mounts and temp blobs of dead forge processes go away.
	rt, err := sandbox.NewRuntime(ctx, sandbox.Options{StateDir: cfg.StateDir, Logger: g.log,
		IDRange:     idmap.Range{Start: cfg.Security.UIDRangeStart, Size: cfg.Security.UIDRangeSize},
		IDBlockSize: cfg.Security.UIDMapSize})
	if err != nil {
		return err
	}
	defer rt.Close()
	rep, err := rt.Cleanup(ctx)
	if err != nil {
		return err
	}
	st, err := rootfs.Open(ctx, rootfs.Options{StateDir: cfg.StateDir, Logger: g.log})
	if err != nil {
		return err
	}
	defer st.Close()
	srep, err := st.GC(ctx)
	if err != nil {
		return err
	}
	imgs, err := st.Images(ctx)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		have[img.ID] = true
	}
	arep, err := rt.CleanupAgents(func(id string) bool { return have[id] })
	if err != nil {
		return err
	}
	b, err := build.New(build.Options{Store: st, Runtime: rt, Config: cfg, Logger: g.log})
	if err != nil {
		return usageError{err}
	}
	envs, err := b.GC(ctx, 0)
	if err != nil {
		return err
	}
	first := rt.Recovered() // opening the runtime already cleaned up
	fmt.Fprintf(g.stdout, "sandboxes removed: %d, cgroups removed: %d\n", len(first.Sandboxes)+len(rep.Sandboxes), len(first.Cgroups)+len(rep.Cgroups))
	fmt.Fprintf(g.stdout, "host id leases of dead processes: released %d, still in use %d\n", len(first.Leases)+len(rep.Leases), len(rep.LeasesBusy))
	fmt.Fprintf(g.stdout, "store: dead processes %d, mounts removed %d, temp bytes freed %d\n",
		len(srep.DeadProcesses), len(srep.Unmounted), srep.TempBytes)
	fmt.Fprintf(g.stdout, "agent: directories of other builds removed %d, bytecode of removed images %d\n",
		len(arep.Dirs), len(arep.Bytecode))
	fmt.Fprintf(g.stdout, "environments unused for %s removed: %d %s; build containers of dead processes: %d\n",
		cfg.EnvironmentBuilder.GCAge, len(envs), strings.Join(envs, " "), len(srep.Scratch))
	return nil
}
