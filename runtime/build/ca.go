package build

import (
	"os"
	"path/filepath"
)

// hostCABundles are where Linux distributions keep the host's trust store
// as one PEM bundle, in the order Go's crypto/x509 looks for them.
var hostCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine
}

// caBundleOf is the CA bundle that builds trust for the index:
// environment_builder.ca_bundle when set, else the host's trust store (the
// first of hostCABundles under root that is a regular file, symlinks
// followed), else "" for the installer's built-in roots. The host's store
// is the default because whoever runs forge behind a TLS-inspecting proxy
// has taught the host, not forge, to trust it; the installer's built-in
// roots would fail there with "invalid peer certificate: UnknownIssuer".
func caBundleOf(configured, root string) string {
	if configured != "" {
		return configured
	}
	for _, p := range hostCABundles {
		real, err := filepath.EvalSymlinks(filepath.Join(root, p))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			return real
		}
	}
	return ""
}
