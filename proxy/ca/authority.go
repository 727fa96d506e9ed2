package ca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultLeafTTL   = 6 * time.Hour
	DefaultCacheSize = 10000
)

// Options tune an Authority. The zero Options is the defaults.
type Options struct {
	// LeafTTL is how long a minted leaf is valid (its NotBefore is
	// backdated 5 minutes more, for clock skew). A cached leaf is minted
	// again once half of it has passed. If zero, 6h is used.
	LeafTTL time.Duration
	// CacheSize bounds the leaves kept in memory (least recently used are
	// dropped). If zero, 10000 is used.
	CacheSize int
	// Now is the clock. If nil, time.Now is used.
	Now func() time.Time
	// Configured are roots given by the operator (identities[].ca_cert and
	// ca_key), by identity; such an identity's root is never created in
	// the directory. If nil, none.
	Configured map[string]Files
	// Identities are the identities served. When the directory is
	// read-only (a mounted Secret of shared roots), Open refuses unless
	// each of them has a root there or a configured one, so a missing
	// root stops start-up rather than an inspected CONNECT. If nil, none
	// is checked.
	Identities []string
}

// Files name a configured root: its PEM certificate, which must be a
// self-signed CA, and its PEM private key, held to the same mode and owner
// checks as the keys of the CA directory.
type Files struct {
	Cert, Key string
}

// Stats count an Authority's work since Open.
type Stats struct {
	// Mints is the number of leaves signed; Hits the number of Leaf calls
	// answered from the cache (or by waiting on another caller's mint).
	Mints, Hits uint64
	// Roots is the number of roots created (not loaded).
	Roots uint64
	// Cached is the number of leaves in the cache now.
	Cached int
}

// Authority mints leaves from per-identity roots kept in one directory. It
// is safe for concurrent use.
type Authority struct {
	dir string
	// readOnly: the directory cannot be written (a mounted Secret), so
	// roots are loaded, never created, and no lock is taken.
	readOnly bool
	ttl      time.Duration
	now      func() time.Time

	rootMu   sync.RWMutex
	roots    map[string]*root // by file stem
	createMu sync.Mutex       // serializes root creation in this process
	mu       sync.Mutex       // guards cache, inflight and stats
	cache    *lru
	inflight map[leafKey]*mintCall
	stats    Stats
}

// mintCall is a mint in progress; callers for the same key wait on done.
type mintCall struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// Init creates dir with mode 0700 (and its parents, if missing) and
// nothing else: roots are created per identity on first use or by `egressd
// ca export`. An existing directory is accepted if Open would accept it.
func Init(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CA directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	return checkKeys(dir)
}

// Open loads or creates the CA directory dir. It refuses a directory
// writable by others and a private key file that group or others may read
// or write, or that another user owns, saying how to fix it; it loads every
// root present, so a damaged one stops start-up rather than a request. A
// directory egressd cannot write (shared roots mounted read-only) is only
// read: every one of o.Identities must have its root there.
func Open(dir string, o Options) (*Authority, error) {
	o, err := o.provision()
	if err != nil {
		return nil, err
	}
	if err := Init(dir); err != nil {
		return nil, err
	}
	readOnly := readOnlyDir(dir)
	if !readOnly {
		l, err := lockDir(dir)
		if err != nil {
			return nil, err
		}
		err = removeTemps(dir)
		l.unlock()
		if err != nil {
			return nil, err
		}
	}
	a := &Authority{
		dir: dir, readOnly: readOnly, ttl: o.LeafTTL, now: o.Now,
		cache: newLRU(o.CacheSize), inflight: map[leafKey]*mintCall{},
	}
	if a.roots, err = loadRoots(dir, o.Configured); err != nil {
		return nil, err
	}
	if readOnly {
		if err := haveRoots(dir, a.roots, o.Identities); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Check refuses what Open would refuse, with the same messages, and
// writes nothing: a directory that does not exist yet is accepted (Open
// creates it), and a directory that exists is checked and its roots and
// the configured ones loaded. It is `egressd serve --check`'s CA step.
func Check(dir string, o Options) error {
	o, err := o.provision()
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		_, err := loadRoots("", o.Configured)
		return err
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	if err := checkKeys(dir); err != nil {
		return err
	}
	roots, err := loadRoots(dir, o.Configured)
	if err != nil || !readOnlyDir(dir) {
		return err
	}
	return haveRoots(dir, roots, o.Identities)
}

// provision fills o's zero values with the defaults and refuses negative
// ones.
func (o Options) provision() (Options, error) {
	if o.LeafTTL == 0 {
		o.LeafTTL = DefaultLeafTTL
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeafTTL < 0 || o.CacheSize < 0 {
		return o, fmt.Errorf("CA options: leaf TTL and cache size must be >= 0, got %v and %d", o.LeafTTL, o.CacheSize)
	}
	return o, nil
}

// loadRoots loads every root in dir ("" for none) and then the configured
// ones, which replace any of the directory's for their identity.
func loadRoots(dir string, configured map[string]Files) (map[string]*root, error) {
	roots := map[string]*root{}
	if dir != "" {
		certs, err := entries(dir, func(name string) bool { return strings.HasSuffix(name, certExt) })
		if err != nil {
			return nil, err
		}
		for _, c := range certs {
			stem := filepath.Base(c[:len(c)-len(certExt)])
			r, err := loadPair(c, filepath.Join(dir, stem+keyExt))
			if err != nil {
				return nil, err
			}
			roots[stem] = r
		}
	}
	for id, f := range configured {
		r, err := loadPair(f.Cert, f.Key)
		if err == nil {
			err = r.cert.CheckSignatureFrom(r.cert)
		}
		if err != nil {
			return nil, fmt.Errorf("configured CA of identity %q must be a self-signed root and its key: %w", id, err)
		}
		roots[fileStem(id)] = r
	}
	return roots, nil
}

// haveRoots refuses a read-only directory (shared roots) that lacks the
// root of one of identities: it cannot be created there.
func haveRoots(dir string, roots map[string]*root, identities []string) error {
	for _, id := range identities {
		if _, ok := roots[fileStem(id)]; !ok {
			return missingRoot(dir, id)
		}
	}
	return nil
}

// missingRoot is the refusal to create identity's root in a read-only
// directory: shared roots are made once, ahead of time, so every replica
// serves the same one.
func missingRoot(dir, identity string) error {
	stem := fileStem(identity)
	return fmt.Errorf("CA directory %s is read-only (shared roots, e.g. a mounted Secret) and has no root for identity %q: "+
		"create it in a writable directory with `egressd ca export --ca-dir DIR --identity %s`, add DIR/%s.crt and "+
		"DIR/%s.key to the shared roots (Secret egressd-ca), and restart egressd",
		dir, identity, identity, stem, stem)
}

// ReadOnly reports whether the directory holds read-only shared roots,
// which are loaded and never created.
func (a *Authority) ReadOnly() bool { return a.readOnly }

// Root returns identity's root certificate, creating the root if absent.
func (a *Authority) Root(identity string) (*x509.Certificate, error) {
	r, err := a.root(identity)
	if err != nil {
		return nil, err
	}
	return r.cert, nil
}

// Leaf returns a certificate for host (a DNS name, or an IP literal without
// brackets) signed by identity's own root, which is created on first use.
// Its only subject alternative name is host (lower-cased). Leaves are
// cached per (identity, host) until half their validity has passed;
// concurrent first calls for one key mint once, and no lock is held while
// signing.
func (a *Authority) Leaf(identity, host string) (*tls.Certificate, error) {
	host, err := canonicalHost(host)
	if err != nil {
		return nil, err
	}
	k := leafKey{identity, host}
	a.mu.Lock()
	if e, ok := a.cache.get(k); ok && a.now().Before(e.refresh) {
		a.stats.Hits++
		a.mu.Unlock()
		return e.cert, nil
	}
	if c, ok := a.inflight[k]; ok {
		a.stats.Hits++
		a.mu.Unlock()
		<-c.done
		return c.cert, c.err
	}
	c := &mintCall{done: make(chan struct{})}
	a.inflight[k] = c
	a.mu.Unlock()

	now := a.now()
	r, err := a.root(identity)
	if err == nil {
		c.cert, err = mintLeaf(r, host, now, a.ttl)
	}
	c.err = err

	a.mu.Lock()
	delete(a.inflight, k)
	if err == nil {
		a.stats.Mints++
		a.cache.add(&leafEntry{key: k, cert: c.cert, refresh: now.Add(a.ttl / 2)})
	}
	a.mu.Unlock()
	close(c.done)
	return c.cert, c.err
}

// Stats returns the counts so far.
func (a *Authority) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Cached = a.cache.len()
	return s
}

// root returns identity's root, loading it from the directory (another
// process may have created it) or creating it.
func (a *Authority) root(identity string) (*root, error) {
	stem := fileStem(identity)
	a.rootMu.RLock()
	r, ok := a.roots[stem]
	a.rootMu.RUnlock()
	if ok {
		return r, nil
	}
	a.createMu.Lock()
	defer a.createMu.Unlock()
	a.rootMu.RLock()
	r, ok = a.roots[stem]
	a.rootMu.RUnlock()
	if ok {
		return r, nil
	}
	r, err := a.loadOrCreate(identity, stem)
	if err != nil {
		return nil, fmt.Errorf("CA for identity %q: %w", identity, err)
	}
	a.rootMu.Lock()
	a.roots[stem] = r
	a.rootMu.Unlock()
	return r, nil
}

// loadOrCreate runs under the directory lock. The key is written before
// the certificate, so a certificate on disk always has its key; a key
// without a certificate (a crash between the two) was never trusted by
// anyone and is replaced.
func (a *Authority) loadOrCreate(identity, stem string) (*root, error) {
	if a.readOnly {
		return nil, missingRoot(a.dir, identity)
	}
	l, err := lockDir(a.dir)
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	certPath, keyPath := filepath.Join(a.dir, stem+certExt), filepath.Join(a.dir, stem+keyExt)
	if _, err := os.Stat(certPath); err == nil {
		return loadPair(certPath, keyPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	r, der, err := newRoot(identity, a.now())
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(r.key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	if err := writeAtomic(a.dir, stem+keyExt, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeAtomic(a.dir, stem+certExt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.stats.Roots++
	a.mu.Unlock()
	return r, nil
}
