// Package defaults owns the one config-defaulting rule every section of
// egressd's YAML follows (Caddy's Provision step): a zero value means the
// documented default. Each section's Provision calls Fill with its
// DefaultConfig, so a field added later is defaulted without anyone
// remembering to, and a key whose zero is itself meaningful (dns.min_ttl,
// postgres.max_sessions) simply has a zero default.
package defaults

import "reflect"

// Fill sets every exported field of *c that holds its zero value to the
// same field of d. It does not descend into struct fields: sections are
// flat. A nil slice or map is zero, an empty non-nil one is not, so a YAML
// `[]` (which decodes to an empty slice) keeps meaning "none" where the
// default list is not empty.
func Fill[T any](c *T, d T) {
	cv, dv := reflect.ValueOf(c).Elem(), reflect.ValueOf(d)
	if cv.Kind() != reflect.Struct {
		panic("defaults.Fill: " + cv.Type().String() + " is not a struct")
	}
	for i := range cv.NumField() {
		if f := cv.Field(i); f.CanSet() && f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
}
