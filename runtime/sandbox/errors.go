package sandbox

import "errors"

var (
	// ErrInvalidConfig is a sandbox configuration that would break an invariant.
	ErrInvalidConfig = errors.New("invalid sandbox configuration")
	// ErrClosed is returned by operations on a destroyed sandbox.
	ErrClosed = errors.New("sandbox destroyed")
	// ErrSeccompUnsupported: a build without seccomp never runs sandboxes.
	ErrSeccompUnsupported = errors.New("seccomp unsupported")
	// ErrParentLimits: the parent cgroup's limits (Options.Parent) could
	// not be written.
	ErrParentLimits = errors.New("cannot limit the parent cgroup")
	// ErrNoCgroup: a rootless sandbox without a cgroup has no counters to read.
	ErrNoCgroup = errors.New("sandbox has no cgroup (rootless mode without a delegated cgroup)")
	// ErrZygoteUnavailable: a zygote template cannot make children (forge
	// was built without the C helper, zfork.so, or the image's glibc keeps
	// the thread's tid where the template cannot find it), so it did not
	// start; Start makes that image's sandboxes containers instead.
	ErrZygoteUnavailable = errors.New("zygote mode unavailable")
	// errTemplateGone: the zygote template a fork was sent to has died
	// (the fork is retried once on a new template).
	errTemplateGone = errors.New("zygote template gone")
)
