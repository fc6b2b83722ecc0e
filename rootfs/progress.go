package rootfs

import (
	"fmt"
	"io"
	"time"

	"go.podman.io/image/v5/types"
)

// progressInterval is how often an import reports the bytes of the blob it
// is reading: containers/image sends at most one read event per blob per
// interval, so a pull of a few layers prints a few lines a second.
const progressInterval = 500 * time.Millisecond

// reportImport prints containers/image's progress events of one copy as
// lines on w ("importing REF: blob sha256:0123abcd 12.0/51.3 MiB") until
// events is closed. Each blob gets a line when it starts, one per
// progressInterval while it is read, and one when it is done or was
// already present.
func reportImport(w io.Writer, ref string, events <-chan types.ProgressProperties) {
	for ev := range events {
		if w == nil {
			continue // drain: the copy blocks on an unread channel
		}
		blob := "blob " + shortDigest(ev.Artifact.Digest.String())
		if ev.Artifact.MediaType != "" && isConfig(ev.Artifact.MediaType) {
			blob = "config " + shortDigest(ev.Artifact.Digest.String())
		}
		var line string
		switch ev.Event {
		case types.ProgressEventNewArtifact:
			line = fmt.Sprintf("%s: started (%s)", blob, sizeText(ev.Artifact.Size))
		case types.ProgressEventRead:
			line = fmt.Sprintf("%s: %s", blob, fraction(ev.Offset, ev.Artifact.Size))
		case types.ProgressEventDone:
			line = fmt.Sprintf("%s: done (%s)", blob, sizeText(int64(ev.Offset)))
		case types.ProgressEventSkipped:
			line = fmt.Sprintf("%s: already present", blob)
		default:
			continue
		}
		fmt.Fprintf(w, "importing %s: %s\n", ref, line)
	}
}

func isConfig(mediaType string) bool {
	return mediaType == "application/vnd.oci.image.config.v1+json" ||
		mediaType == "application/vnd.docker.container.image.v1+json"
}

// shortDigest is "sha256:" and the first 12 hex digits, as podman prints.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

func fraction(done uint64, size int64) string {
	if size <= 0 {
		return mib(int64(done)) + " MiB"
	}
	return fmt.Sprintf("%s/%s MiB (%d %%)", mib(int64(done)), mib(size), int64(done)*100/size)
}

func sizeText(n int64) string {
	if n < 0 {
		return "size unknown"
	}
	return mib(n) + " MiB"
}

func mib(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
