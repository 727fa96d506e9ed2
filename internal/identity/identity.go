// Package identity is the table of sandboxes egressd knows: who may use the
// proxy (Basic credentials whose token is stored only as a SHA-256 hash), who
// may log in to the Postgres gate (a SCRAM-SHA-256 verifier), which source
// addresses stand for a sandbox that cannot send credentials, and the
// attributes that reach Rego as input.identity.
package identity

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
)

// Entry is one `identities:` item.
type Entry struct {
	// ID is the sandbox id: the proxy Basic user and the Postgres user.
	ID string `yaml:"id"`
	// TokenSHA256 is the hex SHA-256 of the proxy token (the Basic
	// password). If empty, this identity cannot authenticate to the proxy
	// with credentials.
	TokenSHA256 string `yaml:"token_sha256"`
	// SCRAMSHA256 is a PostgreSQL-format verifier
	// ("SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>") for the
	// Postgres gate. If empty, this identity cannot log in to the gate.
	SCRAMSHA256 string `yaml:"scram_sha256"`
	// Sources are CIDRs whose connections are this identity without
	// credentials. If empty, none.
	Sources []string `yaml:"sources"`
	// Attributes reach Rego as input.identity.attributes. If nil, none.
	Attributes map[string]string `yaml:"attributes"`
	// CACert and CAKey are the PEM files of a root the operator made for
	// this identity's inspected tunnels: a self-signed CA and its key
	// (mode 0600, owned by egressd's user). Both or neither; read at start.
	// If empty, the identity's root is created in inspect.ca_dir.
	CACert string `yaml:"ca_cert"`
	CAKey  string `yaml:"ca_key"`
	// ByteBudget bounds the bytes the identity sends and receives through
	// the proxy per window (bodies and tunnels, both directions). If nil,
	// none.
	ByteBudget *ByteBudget `yaml:"byte_budget"`
	// Mode is "enforce" or "observe": an observing identity's requests
	// that a rule decision would deny are let through and recorded as
	// would_deny (see policy.ModeObserve). If empty, enforce.
	Mode string `yaml:"mode"`
}

// ByteBudget is `byte_budget: {bytes: N, per: 24h}`.
type ByteBudget struct {
	Bytes int64  `yaml:"bytes"`
	Per   string `yaml:"per"`
}

// Window is the budget's window; Validate has checked it parses.
func (b *ByteBudget) Window() time.Duration {
	d, _ := time.ParseDuration(b.Per)
	return d
}

// Config is the `identities:` section: a list of entries.
type Config []Entry

// Validate checks values without I/O. Errors name the key relative to the
// section, e.g. `[2].token_sha256 must be 64 hex digits`.
func (c Config) Validate() error {
	seen := make(map[string]bool, len(c))
	for i, e := range c {
		if e.ID == "" || strings.ContainsAny(e.ID, ":\x00") {
			return fmt.Errorf("[%d].id must be non-empty without ':' or NUL, got %q", i, e.ID)
		}
		if seen[e.ID] {
			return fmt.Errorf("[%d].id %q is listed twice", i, e.ID)
		}
		seen[e.ID] = true
		// Never print the value of token_sha256 or scram_sha256: the
		// usual mistake is pasting the token itself, and a config error
		// ends up in logs and terminals.
		if e.TokenSHA256 != "" {
			if b, err := hex.DecodeString(e.TokenSHA256); err != nil || len(b) != sha256.Size {
				return fmt.Errorf("[%d].token_sha256 must be 64 hex digits, the SHA-256 of the token and never the token itself "+
					"(value not shown: it may be a secret); get it with `egressd identity hash --id %s`", i, e.ID)
			}
		}
		if e.SCRAMSHA256 != "" && !strings.HasPrefix(e.SCRAMSHA256, "SCRAM-SHA-256$") {
			return fmt.Errorf("[%d].scram_sha256 must start with \"SCRAM-SHA-256$\" (value not shown: it may be a secret); "+
				"get it with `egressd identity hash --id %s`", i, e.ID)
		}
		if e.TokenSHA256 == "" && e.SCRAMSHA256 == "" && len(e.Sources) == 0 {
			return fmt.Errorf("[%d] (id %q) has no token_sha256, scram_sha256 or sources, so no client can ever be it: "+
				"add a credential (`egressd identity hash --id %s`) or a source CIDR, or remove the entry", i, e.ID, e.ID)
		}
		if (e.CACert == "") != (e.CAKey == "") {
			return fmt.Errorf("[%d] (id %q) sets only one of ca_cert and ca_key: a configured root needs both files, "+
				"or leave both empty to have egressd create the root in inspect.ca_dir", i, e.ID)
		}
		for j, s := range e.Sources {
			if _, err := netip.ParsePrefix(s); err != nil {
				return fmt.Errorf("[%d].sources[%d] must be a CIDR, got %q", i, j, s)
			}
		}
		if _, err := policy.ParseMode(e.Mode); err != nil {
			return fmt.Errorf("[%d].mode %w (id %q)", i, err, e.ID)
		}
		if b := e.ByteBudget; b != nil {
			if b.Bytes < 1 {
				return fmt.Errorf("[%d].byte_budget.bytes must be positive, got %d", i, b.Bytes)
			}
			if d, err := time.ParseDuration(b.Per); err != nil || d < time.Minute || d > 31*24*time.Hour {
				return fmt.Errorf("[%d].byte_budget.per must be a duration from 1m to 744h (\"24h\"), got %q", i, b.Per)
			}
		}
	}
	return nil
}

// Anonymous is the identity of every client when no identities are
// configured (see AllAnonymous): the proxy, the DNS server, check and
// `ca export` all name it so.
var Anonymous = policy.Identity{ID: "anonymous"}

// Store answers identity questions. It is immutable once built; a reload
// builds a new one.
type Store struct {
	byID    map[string]*record
	sources []source
}

type record struct {
	entry    Entry
	token    [sha256.Size]byte
	hasToken bool
	identity policy.Identity
}

type source struct {
	prefix netip.Prefix
	rec    *record
}

// New builds a Store from a validated Config.
func New(c Config) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("identities%w", err)
	}
	s := &Store{byID: make(map[string]*record, len(c))}
	for _, e := range c {
		mode, _ := policy.ParseMode(e.Mode)
		r := &record{entry: e, identity: policy.Identity{ID: e.ID, Attributes: e.Attributes, Mode: mode}}
		if e.TokenSHA256 != "" {
			b, _ := hex.DecodeString(e.TokenSHA256)
			copy(r.token[:], b)
			r.hasToken = true
		}
		s.byID[e.ID] = r
		for _, src := range e.Sources {
			p, _ := netip.ParsePrefix(src)
			s.sources = append(s.sources, source{prefix: p.Masked(), rec: r})
		}
	}
	return s, nil
}

// Authenticate checks a proxy Basic user and token. The comparison is
// constant-time in the token; unknown ids cost the same hash.
func (s *Store) Authenticate(id, token string) (policy.Identity, bool) {
	return s.AuthenticateSum(id, sha256.Sum256([]byte(token)))
}

// AuthenticateSum is Authenticate for a token already hashed: the proxy
// keeps the hash of a tunnel's token (never the token) to ask again after a
// reload whether it still authenticates.
func (s *Store) AuthenticateSum(id string, sum [sha256.Size]byte) (policy.Identity, bool) {
	r, ok := s.byID[id]
	if !ok || !r.hasToken {
		var zero [sha256.Size]byte
		subtle.ConstantTimeCompare(sum[:], zero[:])
		return policy.Identity{}, false
	}
	if subtle.ConstantTimeCompare(sum[:], r.token[:]) != 1 {
		return policy.Identity{}, false
	}
	return r.identity, true
}

// BySource returns the identity mapped to a client address, choosing the
// longest matching prefix.
func (s *Store) BySource(addr netip.Addr) (policy.Identity, bool) {
	addr = addr.Unmap()
	var best *source
	for i := range s.sources {
		src := &s.sources[i]
		if src.prefix.Contains(addr) && (best == nil || src.prefix.Bits() > best.prefix.Bits()) {
			best = src
		}
	}
	if best == nil {
		return policy.Identity{}, false
	}
	return best.rec.identity, true
}

// Lookup returns the entry for id, for the Postgres gate's SCRAM exchange.
func (s *Store) Lookup(id string) (Entry, policy.Identity, bool) {
	r, ok := s.byID[id]
	if !ok {
		return Entry{}, policy.Identity{}, false
	}
	return r.entry, r.identity, true
}

// ByteBudget is id's byte budget, nil when it has none.
func (s *Store) ByteBudget(id string) *ByteBudget {
	if s == nil {
		return nil
	}
	if r, ok := s.byID[id]; ok {
		return r.entry.ByteBudget
	}
	return nil
}

// AllAnonymous reports whether every client is Anonymous: s is nil or
// lists no identities. Once any identity is listed, a client must prove
// it is one of them (credentials or a source mapping).
func (s *Store) AllAnonymous() bool { return s == nil || len(s.byID) == 0 }

// HasSources reports whether any identity lists sources: the DNS listener,
// whose queries carry no credentials, can tell a listed identity only by
// its source address.
func (s *Store) HasSources() bool { return s != nil && len(s.sources) > 0 }

// Len is the number of identities.
func (s *Store) Len() int { return len(s.byID) }
