package build

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCABundleDefault: an empty environment_builder.ca_bundle means the
// host's trust store, found where the distribution keeps it (a symlink
// followed to its file), and the installer's built-in roots only when the
// host has none; a configured bundle is used as given.
func TestCABundleDefault(t *testing.T) {
	write := func(root, p, data string) string {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return full
	}
	debian := t.TempDir()
	want := write(debian, "/etc/ssl/certs/ca-certificates.crt", "pem")
	write(debian, "/etc/ssl/cert.pem", "pem") // later in the order

	fedora := t.TempDir()
	real := write(fedora, "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "pem")
	link := filepath.Join(fedora, "/etc/pki/tls/certs/ca-bundle.crt")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink("../../ca-trust/extracted/pem/tls-ca-bundle.pem", link); err != nil {
		t.Fatal(err)
	}

	empty := t.TempDir()
	write(empty, "/etc/ssl/certs/ca-certificates.crt", "") // an empty file is no bundle
	os.MkdirAll(filepath.Join(empty, "/etc/ssl/cert.pem"), 0o755)

	for _, tc := range []struct {
		name, configured, root, want string
	}{
		{"debian", "", debian, want},
		{"fedora symlink", "", fedora, real},
		{"none on the host", "", empty, ""},
		{"configured wins", "/srv/corp-ca.pem", debian, "/srv/corp-ca.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := caBundleOf(tc.configured, tc.root); got != tc.want {
				t.Errorf("caBundleOf(%q, %s) = %q, want %q", tc.configured, tc.root, got, tc.want)
			}
		})
	}
}
