// Package redact removes secret values from error messages, for errors
// about to be logged or printed, without breaking the error chain: the
// config loader and the credential broker both redact this way.
package redact

import "strings"

// Sub is one value to remove from a message and the text that takes its
// place (which names the secret, never quotes it).
type Sub struct{ Value, With string }

// Error returns err with every Value of subs its message quotes replaced
// by the With, in the order of subs; errors.Is and errors.As still see
// err. It returns err itself when the message quotes none of them. Callers
// leave out empty values, which would match everywhere.
func Error(err error, subs []Sub) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, s := range subs {
		out = strings.ReplaceAll(out, s.Value, s.With)
	}
	if out == msg {
		return err
	}
	return &redactedError{msg: out, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
