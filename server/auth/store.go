package auth

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/forge/profiles"
)

// FileName is the token store's file in the state dir.
const FileName = "tokens.json"

// maxStoreSize bounds what is read back from the token file.
const maxStoreSize = 4 << 20

// Token is one known token: its hash, never the token.
type Token struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Scopes  []string  `json:"scopes"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
	Source  string    `json:"-"` // "config" for configured tokens
}

type storeFile struct {
	Tokens []Token `json:"tokens"`
}

// Store is the token file. Writers (forge token) take an flock on it and
// replace it atomically; readers (a running server) re-read it when its
// modification time or size changes.
type Store struct {
	path string

	mu     sync.Mutex
	stamp  [2]int64 // mtime ns, size of the cached read
	cached []Token
}

// OpenStore returns the store at <stateDir>/tokens.json (which need not exist).
func OpenStore(stateDir string) *Store { return &Store{path: filepath.Join(stateDir, FileName)} }

// Path is the token file's path.
func (s *Store) Path() string { return s.path }

// List returns the stored tokens.
func (s *Store) List() ([]Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path)
	if os.IsNotExist(err) {
		s.cached, s.stamp = nil, [2]int64{}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	stamp := [2]int64{fi.ModTime().UnixNano(), fi.Size()}
	if stamp == s.stamp && s.cached != nil {
		return s.cached, nil
	}
	toks, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cached, s.stamp = toks, stamp
	return toks, nil
}

func (s *Store) read() ([]Token, error) {
	f, err := os.Open(s.path)
	if os.IsNotExist(err) {
		return []Token{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %o; want 0600 (chmod 600 it)", ErrStore, s.path, fi.Mode().Perm())
	}
	if fi.Size() > maxStoreSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, over %d", ErrStore, s.path, fi.Size(), maxStoreSize)
	}
	var sf storeFile
	if err := json.NewDecoder(f).Decode(&sf); err != nil {
		return nil, fmt.Errorf("%w: parsing %s: %w", ErrStore, s.path, err)
	}
	if sf.Tokens == nil {
		sf.Tokens = []Token{}
	}
	return sf.Tokens, nil
}

// Create makes a new random token for tenant with scopes, stores its hash
// and returns the token itself (shown once; forge cannot show it again).
func (s *Store) Create(tenant string, scopes []string) (string, Token, error) {
	if err := profiles.ValidTenant(tenant); err != nil {
		return "", Token{}, err
	}
	if err := profiles.ValidScopes(scopes); err != nil {
		return "", Token{}, err
	}
	var idb [6]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", Token{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", Token{}, err
	}
	id := hex.EncodeToString(idb[:])
	tok := "forge_" + id + "_" + hex.EncodeToString(secret[:])
	t := Token{ID: id, Tenant: tenant, Scopes: slices.Clone(scopes), SHA256: Hash(tok), Created: time.Now().UTC().Truncate(time.Second)}
	err := s.update(func(ts []Token) ([]Token, error) { return append(ts, t), nil })
	if err != nil {
		return "", Token{}, err
	}
	return tok, t, nil
}

// Revoke removes the token with id.
func (s *Store) Revoke(id string) error {
	return s.update(func(ts []Token) ([]Token, error) {
		i := slices.IndexFunc(ts, func(t Token) bool { return t.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("%w: %q (forge token ls lists them)", ErrTokenNotFound, id)
		}
		return slices.Delete(ts, i, i+1), nil
	})
}

// update changes the file under an exclusive lock and replaces it
// atomically (temp file, fsync, rename), mode 0600.
func (s *Store) update(f func([]Token) ([]Token, error)) error {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	lock, err := os.OpenFile(s.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("%w: locking: %w", ErrStore, err)
	}
	toks, err := s.read()
	if err != nil {
		return err
	}
	if toks, err = f(toks); err != nil {
		return err
	}
	b, err := json.MarshalIndent(storeFile{Tokens: toks}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tokens-*.json")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing left
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(append(b, '\n'))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		return fmt.Errorf("%w: writing %s: %w", ErrStore, s.path, err)
	}
	return nil
}
