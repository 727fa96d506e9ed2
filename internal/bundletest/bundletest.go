// Package bundletest builds, signs and serves OPA bundles for tests, with
// OPA's own bundle package: a tarball here is what `opa build
// --signing-key KEY --bundle DIR` writes (one /data.json, the modules,
// .manifest, .signatures.json), and Server is a bundle service answering
// If-None-Match with 304 as OPA's downloader expects.
package bundletest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// Key is an RSA signing key and its public half, both PEM.
type Key struct {
	Private, Public string
}

// NewKey makes a 2048-bit RSA key (RS256, `opa build`'s default).
func NewKey() (Key, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return Key{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return Key{}, err
	}
	return Key{
		Private: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})),
		Public:  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
	}, nil
}

// Files reads the modules and data.json files of fsys (a bundle
// directory), by slash path.
func Files(fsys fs.FS) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(p, ".rego") || path.Base(p) == "data.json" {
			b, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			out[p] = b
		}
		return nil
	})
	return out, err
}

// Tarball is the bundle of files (modules and data.json files by slash
// path, each data file merged at its directory as the OPA loader does)
// with revision, signed with key under keyID unless key is nil.
func Tarball(files map[string][]byte, revision string, key *Key, keyID string) ([]byte, error) {
	return tarball(files, revision, key, keyID, false)
}

// Tampered is Tarball signed, then with a module changed after signing: a
// bundle someone altered on the way.
func Tampered(files map[string][]byte, revision string, key Key, keyID string) ([]byte, error) {
	return tarball(files, revision, &key, keyID, true)
}

func tarball(files map[string][]byte, revision string, key *Key, keyID string, tamper bool) ([]byte, error) {
	b := bundle.Bundle{Manifest: bundle.Manifest{Revision: revision}, Data: map[string]any{}}
	// In path order: Tampered alters the first module.
	for _, p := range slices.Sorted(maps.Keys(files)) {
		raw := files[p]
		if strings.HasSuffix(p, ".rego") {
			m, err := ast.ParseModuleWithOpts(p, string(raw), ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				return nil, err
			}
			b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + p, Path: "/" + p, Raw: raw, Parsed: m})
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		node := b.Data
		if dir := path.Dir(p); dir != "." {
			for _, seg := range strings.Split(dir, "/") {
				next, ok := node[seg].(map[string]any)
				if !ok {
					next = map[string]any{}
					node[seg] = next
				}
				node = next
			}
		}
		for k, x := range v {
			node[k] = x
		}
	}
	if key != nil {
		if err := b.GenerateSignature(bundle.NewSigningConfig(key.Private, "RS256", ""), keyID, false); err != nil {
			return nil, fmt.Errorf("sign bundle: %w", err)
		}
	}
	if tamper {
		if len(b.Modules) == 0 {
			return nil, fmt.Errorf("tamper: the bundle has no module")
		}
		m := &b.Modules[0]
		m.Raw = append(append([]byte{}, m.Raw...), "\n# altered after signing\n"...)
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ETag is the entity tag Server sends for body.
func ETag(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}
