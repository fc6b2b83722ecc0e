package build

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A full disk is recognised wherever a build writes: on the host (the
// scratch layer's directories, the uv cache, the layer's diff in the
// store's temp dir, the committed layer) by the errno, and inside the
// build sandbox by the installer's words for ENOSPC and EDQUOT.

const stateDirHint = "set state_dir to a directory on a bigger device (forge gc removes unused environments)"

// noSpace turns err into a *NoSpaceError when a device was full; where is
// the host path the step writes to when err names none.
func (b *Builder) noSpace(err error, where string) error {
	if err == nil || errors.As(err, new(*NoSpaceError)) {
		return err
	}
	quota := errors.Is(err, unix.EDQUOT)
	if !quota && !errors.Is(err, unix.ENOSPC) {
		// containers/storage does not always wrap the errno.
		msg := strings.ToLower(err.Error())
		switch {
		case strings.Contains(msg, "disk quota exceeded"):
			quota = true
		case strings.Contains(msg, "no space left on device"):
		default:
			return err
		}
	}
	var pe *os.PathError
	if errors.As(err, &pe) && filepath.IsAbs(pe.Path) {
		where = pe.Path
	}
	return b.placeOf(where, quota, err)
}

// placeOf names the part of the state dir that path is in.
func (b *Builder) placeOf(path string, quota bool, err error) *NoSpaceError {
	st := b.opts.Store
	cache := filepath.Join(b.dir, "cache")
	e := &NoSpaceError{Path: path, Quota: quota, Err: err, Hint: stateDirHint}
	switch {
	case within(path, st.TempDir()):
		e.What, e.Path = "the image store's temp dir", st.TempDir()
	case within(path, st.StorageDir()):
		e.What, e.Path = "the image store", st.StorageDir()
	case within(path, cache):
		e.What, e.Path = "the uv cache", cache
	default:
		e.What = "the state dir"
	}
	return e
}

func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// installNoSpace recognises a full device in the installer's output (uv:
// "No space left on device (os error 28)", pip: "[Errno 28] No space left
// on device") and names it by the sandbox path on the same line: the
// writable layer, the uv cache or the sandbox's /tmp.
func (b *Builder) installNoSpace(ie *InstallError, p *plan) error {
	var line string
	quota := false
	for _, l := range strings.Split(ie.Output, "\n") {
		low := strings.ToLower(l)
		switch {
		case strings.Contains(low, "disk quota exceeded") || strings.Contains(l, "os error 122") || strings.Contains(l, "Errno 122"):
			line, quota = l, true
		case strings.Contains(low, "no space left on device") || strings.Contains(l, "os error 28") || strings.Contains(l, "Errno 28"):
			line, quota = l, false
		}
	}
	if line == "" {
		return ie
	}
	// "failed to copy file from CACHE to TARGET: No space left": the
	// place written to is the one named last.
	last, at := "", -1
	for _, place := range []string{cacheMount, p.target, "/tmp/"} {
		if i := strings.LastIndex(line, place); place != "" && i > at {
			last, at = place, i
		}
	}
	switch last {
	case cacheMount:
		return b.placeOf(b.cacheDir(p), quota, ie)
	case p.target:
		e := b.placeOf(b.opts.Store.StorageDir(), quota, ie)
		e.What = "the build's writable layer in the image store"
		return e
	case "/tmp/":
		return &NoSpaceError{What: "the build sandbox's /tmp (memory)", Quota: quota, Err: ie,
			Hint: "raise environment_builder.build_memory (/tmp gets half of it, at most 512 MiB)"}
	}
	// The installer named no path: the writable layer and the uv cache
	// are both under the state dir.
	return &NoSpaceError{What: "the image store or the uv cache", Path: b.opts.Config.StateDir, Quota: quota, Err: ie, Hint: stateDirHint}
}
