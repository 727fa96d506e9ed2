package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strings"
	"testing/fstest"
	"unicode"
	"unicode/utf8"
)

// A bundle from an OPA bundle service (policy.bundle_url) is fetched and
// verified by serve (cmd/egressd/bundlesrc, with OPA's download and bundle
// packages); this package sees only its files and its revision, and loads
// them through readBundle like a directory, so the same checks, the same
// capabilities and the bundle's own Rego tests apply to both.

// BundleVerification is policy.bundle_verification: the public key a
// bundle's .signatures.json must verify against, in OPA's keys format.
type BundleVerification struct {
	// KeyID is the key's id: the keyid claim `opa build --signing-key`
	// writes (its --verification-key-id). If empty, "default" is used.
	KeyID string `yaml:"key_id"`
	// PublicKeyFile is a PEM file holding the public key (or the HMAC
	// secret for HS*). If empty, PublicKey.
	PublicKeyFile string `yaml:"public_key_file"`
	// PublicKey is the PEM itself. If empty, PublicKeyFile.
	PublicKey string `yaml:"public_key"`
	// Algorithm is the signature's JWA algorithm. If empty, RS256 is used.
	Algorithm string `yaml:"algorithm"`
	// Scope is the scope claim a signature must carry. If empty, none is
	// checked.
	Scope string `yaml:"scope"`
	// InsecureUnsigned accepts unsigned bundles (no key is required, and a
	// bundle's signature, if any, is not checked) and an http:// URL.
	// Recorded in the started record. If false, every bundle must be
	// signed by the key.
	InsecureUnsigned bool `yaml:"insecure_unsigned"`
}

// DefaultKeyID is the key id `opa build` writes when given none.
const DefaultKeyID = "default"

// DefaultAlgorithm is the algorithm `opa build --signing-key` signs with
// when given none.
const DefaultAlgorithm = "RS256"

// signingAlgorithms are the algorithms OPA verifies bundle signatures with.
var signingAlgorithms = []string{
	"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512", "HS256", "HS384", "HS512",
}

// validateBundleService checks the bundle_* keys without I/O.
func (c *Config) validateBundleService() error {
	v := c.BundleVerification
	if c.BundleURL == "" {
		if v != (BundleVerification{}) || c.BundleCAFile != "" || c.BundleLongPoll != 0 {
			return errors.New("bundle_verification, bundle_ca_file and bundle_long_poll need bundle_url: set it, or remove them")
		}
		return nil
	}
	if c.Dir != "" {
		return fmt.Errorf("dir and bundle_url are exclusive, got dir %q and bundle_url %q: the bundle comes from one place", c.Dir, c.BundleURL)
	}
	u, err := url.Parse(c.BundleURL)
	switch {
	case err != nil:
		return fmt.Errorf("bundle_url %q: %w", c.BundleURL, err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("bundle_url must be https://HOST/PATH, got %q", c.BundleURL)
	case u.User != nil:
		// It would be logged and shown in errors; OPA's services take
		// credentials in headers, which this URL cannot carry either.
		return fmt.Errorf("bundle_url must not carry credentials (user:password@), got %q", u.Redacted())
	case u.Scheme == "http" && !v.InsecureUnsigned:
		return fmt.Errorf("bundle_url must be https://, got %q: a bundle over plain HTTP is only accepted with bundle_verification.insecure_unsigned: true", c.BundleURL)
	}
	if !v.InsecureUnsigned {
		if (v.PublicKeyFile == "") == (v.PublicKey == "") {
			return errors.New("bundle_verification needs exactly one of public_key_file and public_key (PEM), " +
				"or insecure_unsigned: true to accept unsigned bundles")
		}
	}
	if v.Algorithm != "" && !slices.Contains(signingAlgorithms, v.Algorithm) {
		return fmt.Errorf("bundle_verification.algorithm must be one of %s, got %q", strings.Join(signingAlgorithms, ", "), v.Algorithm)
	}
	switch {
	case c.BundlePollMin <= 0:
		return fmt.Errorf("bundle_poll_min must be > 0, got %q", c.BundlePollMin)
	case c.BundlePollMax < c.BundlePollMin:
		return fmt.Errorf("bundle_poll_max must be >= bundle_poll_min (%s), got %q", c.BundlePollMin, c.BundlePollMax)
	case c.BundleLongPoll < 0:
		return fmt.Errorf("bundle_long_poll must be >= 0, got %q", c.BundleLongPoll)
	case c.BundleStartTimeout <= 0:
		return fmt.Errorf("bundle_start_timeout must be > 0, got %q", c.BundleStartTimeout)
	}
	return nil
}

// Fetched is a verified bundle from a bundle service, ready to load.
type Fetched struct {
	// files are its files by slash path relative to the bundle root.
	// fstest.MapFS is the standard library's in-memory fs.FS (nothing
	// of package testing runs): readBundle walks it as it walks a
	// directory.
	files fstest.MapFS
	// Revision is its .manifest revision; "" if it has none.
	Revision string
	// Source names it in messages (its URL).
	Source string
}

// maxRevision bounds a revision: it is in every audit record.
const maxRevision = 128

// NewFetched is the bundle of files (by path, a leading "/" allowed: the
// tarball's spelling) with revision, from source. A path that is not a
// plain relative path, or a revision that is not printable, is refused:
// both are a service's input.
func NewFetched(source, revision string, files map[string][]byte) (*Fetched, error) {
	if err := checkRevision(revision); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", source, err)
	}
	f := &Fetched{files: fstest.MapFS{}, Revision: revision, Source: source}
	for p, b := range files {
		rel := strings.TrimPrefix(p, "/")
		if !fs.ValidPath(rel) || rel == "." {
			return nil, fmt.Errorf("bundle %s: file path %q is not a relative slash path", source, p)
		}
		if _, dup := f.files[rel]; dup {
			return nil, fmt.Errorf("bundle %s: file %q twice", source, rel)
		}
		f.files[rel] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return f, nil
}

// checkRevision refuses a revision too long or holding a character that
// is not printable, or a space, which would make the policy field of a
// record ambiguous to read.
func checkRevision(rev string) error {
	if len(rev) > maxRevision {
		return fmt.Errorf(".manifest revision is longer than %d bytes", maxRevision)
	}
	if !utf8.ValidString(rev) {
		return fmt.Errorf(".manifest revision %q is not UTF-8", rev)
	}
	for _, r := range rev {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf(".manifest revision %q holds a space or a character that is not printable", rev)
		}
	}
	return nil
}

// withRevision is the policy id a record carries: the content digest,
// then "@" and the revision for a bundle that has one.
func withRevision(digest, rev string) string {
	if rev == "" {
		return digest
	}
	return digest + "@" + rev
}

// SplitDigest splits a policy id (Engine.Digest, a record's "policy") into
// the content digest and the bundle service's revision ("" if none). The
// digest is hex, so the first "@" ends it.
func SplitDigest(id string) (digest, revision string) {
	digest, revision, _ = strings.Cut(id, "@")
	return digest, revision
}

// UseDir points c at the bundle in dir, in place of the bundle service or
// directory it names: `check --policy`, `policy check DIR` and the
// archive load a given directory whatever the config fetches from.
func (c *Config) UseDir(dir string) {
	c.Dir, c.BundleURL, c.Fetched = dir, "", nil
	c.BundleVerification, c.BundleCAFile, c.BundleLongPoll = BundleVerification{}, "", 0
}
