// Package bodyfacts turns a request body into the facts a policy decides
// on: Read takes the body whole within a size bound (decoding gzip within
// the same bound), and ParseJSON parses it once into a Rego value, refusing
// every input a server could read differently from the policy.
package bodyfacts

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// The two ways a body is refused. Errors Read and ParseJSON return wrap one
// of them with detail; test with errors.Is.
var (
	// ErrTooLarge is a body over the bound, compressed or decoded.
	ErrTooLarge = errors.New("body too large")
	// ErrUnparseable is a body that is not what it must be: a broken or
	// unsupported Content-Encoding, or not strict JSON.
	ErrUnparseable = errors.New("body unparseable")
)

// Read reads a request body whole and returns its decoded bytes, which are
// what a policy and the scanners see (the proxy forwards the original
// bytes). At most max bytes are read from r: a body of max+1 bytes is
// ErrTooLarge, and a negative max is taken as 0.
//
// contentEncoding is the request's Content-Encoding header: "" or
// "identity" returns the bytes as read; "gzip" or "x-gzip" (any case)
// decodes them, and the decoded size is bounded by max too, so a small
// compressed body cannot expand past what an uncompressed one may be. A
// broken gzip stream, bytes after the last gzip member, and any other
// coding — deflate, br, zstd, or a list such as "gzip, gzip" — are
// ErrUnparseable: egressd decides only on bytes it can read as the server
// will. Concatenated gzip members are one body, as RFC 1952 reads them.
//
// Any other error is r's own (a client gone, a read deadline), wrapped.
func Read(r io.Reader, contentEncoding string, max int64) ([]byte, error) {
	if max < 0 {
		max = 0
	}
	gz, err := isGzip(contentEncoding)
	if err != nil {
		return nil, err
	}
	raw, err := readMax(r, max)
	if err != nil {
		return nil, fmt.Errorf("read request body: %w", err)
	}
	if int64(len(raw)) > max {
		return nil, fmt.Errorf("request body over %d bytes: %w", max, ErrTooLarge)
	}
	if !gz {
		return raw, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("gzip request body: %v: %w", err, ErrUnparseable)
	}
	out, err := readMax(zr, max)
	if int64(len(out)) > max {
		// Checked first: past the bound, whatever follows is unread.
		return nil, fmt.Errorf("gzip request body decodes to over %d bytes: %w", max, ErrTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("gzip request body: %v: %w", err, ErrUnparseable)
	}
	return out, nil
}

// isGzip says whether a Content-Encoding value is gzip, false for none,
// and fails for any other coding or a list of codings.
func isGzip(contentEncoding string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
		return false, nil
	case "gzip", "x-gzip":
		return true, nil
	}
	return false, fmt.Errorf("content-encoding %q: %w", contentEncoding, ErrUnparseable)
}

// readMax reads r to its end or to max+1 bytes, whichever comes first, so
// that a result longer than max says r held more than max.
func readMax(r io.Reader, max int64) ([]byte, error) {
	n := max
	if n < math.MaxInt64 {
		n++
	}
	return io.ReadAll(io.LimitReader(r, n))
}
