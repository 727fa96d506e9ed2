package bundletest

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is a bundle service over TLS: GET of any path answers the
// tarball set last, with its ETag, or 304 to an If-None-Match naming it.
// It long-polls as OPA's protocol has it: a request that prefers
// "wait=N" and names the current ETag is held until Set or N seconds,
// and every answer says long polling is supported (Content-Type
// application/vnd.openpolicyagent.bundles).
type Server struct {
	*httptest.Server
	mu     sync.Mutex
	body   []byte
	status int // if not 0, every request is answered with it
	// served counts 200 answers, by ETag.
	served map[string]int
	// changed is closed, and replaced, by every Set and Fail.
	changed chan struct{}
}

// NewServer starts a TLS bundle service with nothing to serve (404).
func NewServer() *Server {
	s := &Server{served: map[string]int{}, changed: make(chan struct{})}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	return s
}

// Set makes body the bundle served from now on.
func (s *Server) Set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.status = body, 0
	close(s.changed)
	s.changed = make(chan struct{})
}

// Fail makes every request answer status until the next Set.
func (s *Server) Fail(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
	close(s.changed)
	s.changed = make(chan struct{})
}

// Served is how many times the bundle with etag was sent whole.
func (s *Server) Served(etag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[etag]
}

// WriteCA writes the server's certificate, as PEM, to a file in dir for
// policy.bundle_ca_file, and returns its path.
func (s *Server) WriteCA(dir string) (string, error) {
	p := filepath.Join(dir, "bundle-ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return p, os.WriteFile(p, b, 0o644)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	changed := s.changed
	unchanged := s.status == 0 && s.body != nil && matches(r.Header.Get("If-None-Match"), ETag(s.body))
	s.mu.Unlock()
	if wait := longPoll(r.Header.Get("Prefer")); unchanged && wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	w.Header().Set("Content-Type", "application/vnd.openpolicyagent.bundles")
	s.mu.Lock()
	body, status := s.body, s.status
	etag := ETag(body)
	if status == 0 && body != nil && !matches(r.Header.Get("If-None-Match"), etag) {
		s.served[etag]++
	}
	s.mu.Unlock()
	switch {
	case status != 0:
		http.Error(w, http.StatusText(status), status)
	case body == nil:
		http.NotFound(w, r)
	case matches(r.Header.Get("If-None-Match"), etag):
		w.Header().Set("ETag", etag)
		w.WriteHeader(http.StatusNotModified)
	default:
		w.Header().Set("ETag", etag)
		_, _ = w.Write(body)
	}
}

// longPoll is the wait a Prefer header asks for ("modes=…;wait=N"), 0 if
// none.
func longPoll(prefer string) time.Duration {
	for p := range strings.SplitSeq(prefer, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "wait="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}

// matches reports whether an If-None-Match list names etag.
func matches(header, etag string) bool {
	for t := range strings.SplitSeq(header, ",") {
		if strings.TrimSpace(t) == etag {
			return true
		}
	}
	return false
}
