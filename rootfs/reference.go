package rootfs

import (
	"fmt"
	"strings"

	"go.podman.io/image/v5/docker"
	dockerarchive "go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/docker/reference"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/types"
)

// transports are the containers/image transports forge accepts.
var transports = map[string]types.ImageTransport{
	"docker":         docker.Transport,
	"oci":            ocilayout.Transport,
	"oci-archive":    ociarchive.Transport,
	"docker-archive": dockerarchive.Transport,
}

// otherTransports are containers/image transports forge does not accept;
// their names would otherwise read as registry names ("dir:foo").
var otherTransports = map[string]bool{
	"containers-storage": true, "dir": true, "docker-daemon": true, "sif": true,
	"tarball": true, "ostree": true,
}

// ParseReference parses a containers/image reference in one of the forms
// forge accepts: docker://NAME[:TAG|@DIGEST], oci:DIR[:TAG],
// oci-archive:FILE[:TAG], docker-archive:FILE[:NAME:TAG]. Errors are
// *RefError and match ErrBadReference; a bare registry name such as
// "python:3.12-slim" suggests "docker://python:3.12-slim".
func ParseReference(ref string) (types.ImageReference, error) {
	if strings.TrimSpace(ref) == "" {
		return nil, &RefError{Ref: ref, Reason: "empty reference"}
	}
	name, within, hasColon := strings.Cut(ref, ":")
	t, known := transports[name]
	if !hasColon || !known {
		return nil, refErrorFor(ref, name, hasColon)
	}
	if name == "docker" && !strings.HasPrefix(within, "//") {
		return nil, &RefError{Ref: ref, Reason: "docker references start with docker://", Suggestion: "docker://" + within}
	}
	if name != "docker" && (within == "" || strings.HasPrefix(within, ":")) {
		return nil, &RefError{Ref: ref, Reason: "missing path after " + name + ":"}
	}
	r, err := t.ParseReference(within)
	if err != nil {
		return nil, &RefError{Ref: ref, Reason: "cannot parse", Err: err}
	}
	return r, nil
}

// refErrorFor explains a reference without a known transport.
func refErrorFor(ref, transport string, hasColon bool) *RefError {
	e := &RefError{Ref: ref}
	switch {
	case otherTransports[transport]:
		e.Reason = fmt.Sprintf("unknown or unsupported transport %q", transport)
	case looksLikePath(ref):
		e.Reason = "a file or directory needs a transport"
		e.Suggestion = "oci-archive:" + ref
		if !strings.HasSuffix(ref, ".tar") {
			e.Suggestion = "oci:" + ref
		}
	case isDockerName(ref):
		e.Reason = "no transport"
		e.Suggestion = "docker://" + ref
	case hasColon && transport != "":
		e.Reason = fmt.Sprintf("unknown or unsupported transport %q", transport)
	default:
		e.Reason = "no transport"
	}
	return e
}

func looksLikePath(ref string) bool {
	return strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../") || strings.HasPrefix(ref, "~")
}

// isDockerName reports whether ref parses as a registry image name like
// "python:3.12-slim" or "quay.io/org/img@sha256:…".
func isDockerName(ref string) bool {
	_, err := reference.ParseNormalizedNamed(ref)
	return err == nil
}

// normalizedDockerName is the canonical form of a registry name
// ("python:3.12-slim" → "docker.io/library/python:3.12-slim"), or "".
func normalizedDockerName(name string) string {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return ""
	}
	return reference.TagNameOnly(named).String()
}
