package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/egressd/egressd/internal/redact"
	"github.com/egressd/egressd/proxy/broker"
)

// A secret-bearing key holds a secret's stored form or says where the
// secret is kept, and the usual mistake is pasting the secret itself into
// it: a raw token into token_sha256, a password into password_env, a PEM
// key into signing_key. A config error ends up in terminals, CI logs and
// tickets, so errors about these keys name the key and never print the
// value, and Redact removes the values from errors of code that quotes
// what it was given (a file name in an open error, a libpq string).

// secretKey is one secret-bearing key and its value.
type secretKey struct{ key, value string }

// secretKeys lists every secret-bearing key of c: identities[i].token_sha256,
// .scram_sha256 and .ca_key, postgres.upstream (a libpq string may carry a
// password), postgres.password_env, postgres.password_file,
// postgres.tls_key and audit.signing_key.
func (c *Config) secretKeys() []secretKey {
	ks := make([]secretKey, 0, 3*len(c.Identities)+4)
	for i, e := range c.Identities {
		ks = append(ks,
			secretKey{fmt.Sprintf("identities[%d].token_sha256", i), e.TokenSHA256},
			secretKey{fmt.Sprintf("identities[%d].scram_sha256", i), e.SCRAMSHA256},
			secretKey{fmt.Sprintf("identities[%d].ca_key", i), e.CAKey})
	}
	return append(ks,
		secretKey{"postgres.upstream", c.Postgres.Upstream},
		secretKey{"postgres.password_env", c.Postgres.PasswordEnv},
		secretKey{"postgres.password_file", c.Postgres.PasswordFile},
		secretKey{"postgres.tls_key", c.Postgres.TLSKey},
		secretKey{"audit.signing_key", c.Audit.SigningKey})
}

// secretPath matches the dotted paths of the keys secretKeys lists, for
// messages built from the YAML tree (nameKeys), which must not descend
// into a secret key's value: a pasted value can parse as a mapping whose
// keys are the secret. TestSecretPathsMatchSecretKeys keeps the two in
// step. It also matches secrets[i].file and .env, where a brokered secret
// is pasted by mistake; their values are checked without being printed by
// the secrets section (broker.Config.Validate), and are not redacted from
// other messages: a file or variable name is what an operator needs to
// read there. Loaded values are redacted by broker.Secrets.Redact.
var secretPath = regexp.MustCompile(`^(identities\[\d+\]\.(token_sha256|scram_sha256|ca_key)|secrets\[\d+\]\.(file|env)|postgres\.(upstream|password_env|password_file|tls_key)|audit\.signing_key)$`)

// validateSecretShapes refuses values that are the secret rather than where
// it is kept, without printing them. identities and postgres.upstream are
// checked by their own sections, which never print them either.
func (c *Config) validateSecretShapes() error {
	const notShown = "(value not shown: it may be a secret)"
	if env := c.Postgres.PasswordEnv; env != "" && !broker.IsEnvName(env) {
		return fmt.Errorf("postgres.password_env must be the name of an environment variable (letters, digits, '_'), "+
			"not the password itself %s", notShown)
	}
	if strings.ContainsAny(c.Postgres.PasswordFile, "\n\x00") {
		return fmt.Errorf("postgres.password_file must be the path of a file holding the password, not the password itself %s", notShown)
	}
	if isPEM(c.Audit.SigningKey) {
		return fmt.Errorf("audit.signing_key must be the path of a PEM key file (create one with `egressd audit keygen --out FILE`), "+
			"not the key itself %s", notShown)
	}
	if isPEM(c.Postgres.TLSKey) {
		return fmt.Errorf("postgres.tls_key must be the path of a PEM key file, not the key itself %s", notShown)
	}
	for i, e := range c.Identities {
		if isPEM(e.CAKey) {
			return fmt.Errorf("identities[%d].ca_key must be the path of a PEM key file, not the key itself %s", i, notShown)
		}
	}
	return nil
}

// isPEM reports a value that is key material rather than a file name.
func isPEM(s string) bool {
	return strings.ContainsAny(s, "\n\x00") || strings.Contains(s, "-----BEGIN")
}

// minRedacted is the shortest value Redact replaces: shorter ones are no
// secret worth the name, and replacing them would garble the message.
const minRedacted = 4

// Redact returns err with every value of a secret-bearing key of c that
// its message quotes replaced by the key's name. errors.Is and errors.As
// still see err.
func (c *Config) Redact(err error) error {
	var subs []redact.Sub
	for _, k := range c.secretKeys() {
		if len(k.value) >= minRedacted {
			subs = append(subs, redact.Sub{Value: k.value, With: "<" + k.key + ": not shown>"})
		}
	}
	return redact.Error(err, subs)
}
