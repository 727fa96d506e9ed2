// Package dnstest is the one DNS test server for every package and e2e: a
// miekg/dns authoritative server on 127.0.0.1 (UDP and TCP on one port) whose
// records are programmed per name — alternating answers for rebinding, TTL 0,
// CNAMEs, forced truncation over UDP, a delay, a fixed rcode.
package dnstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Entry programs the answers for one name.
type Entry struct {
	// Answers are record sets in zone-file syntax, e.g.
	// "a.test. 0 IN A 127.0.0.2". Query n of the name for one record type
	// gets set n mod len(Answers): two sets make a rebinding name, and a
	// resolver asking A and AAAA in parallel still sees them alternate. Records of other names
	// (CNAME targets) may be included; a CNAME whose target the server
	// knows is followed like a recursive resolver would.
	Answers [][]string
	// Rcode is returned instead of an answer when non-zero (e.g.
	// dns.RcodeServerFailure, dns.RcodeNameError).
	Rcode int
	// TruncateUDP answers every UDP query with an empty truncated reply,
	// forcing the client onto TCP.
	TruncateUDP bool
	// Delay is slept before answering.
	Delay time.Duration
	// NoFollow answers with the name's own records only, like an
	// authoritative server whose CNAME target lives in another zone: the
	// client must ask for the target itself.
	NoFollow bool
}

type entry struct {
	Entry
	sets [][]dns.RR
	n    map[uint16]int // queries so far, per type
}

// Server is a running test server. Names are matched case-insensitively,
// with or without the trailing dot. An unknown name gets NXDOMAIN; a known
// name without records of the asked type gets an empty NOERROR.
type Server struct {
	addr    string
	udp     *dns.Server
	tcp     *dns.Server
	mu      sync.Mutex
	entries map[string]*entry
	queries map[string]int
}

// Start runs a server until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{entries: map[string]*entry{}, queries: map[string]int{}}
	pc, ln, err := ListenPair()
	if err != nil {
		tb.Fatalf("dnstest: %v", err)
	}
	s.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	s.udp = &dns.Server{PacketConn: pc, Handler: h}
	s.tcp = &dns.Server{Listener: ln, Handler: h}
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				tb.Logf("dnstest: serve: %v", err)
			}
		}()
		<-started
	}
	tb.Cleanup(func() {
		_ = s.udp.Shutdown()
		_ = s.tcp.Shutdown()
	})
	return s
}

// ListenPair binds UDP and TCP on one free 127.0.0.1 port, retrying when
// the TCP side of a free UDP port is taken. DNS listeners under test (the
// sandbox-facing server too) need both on one port.
func ListenPair() (net.PacketConn, net.Listener, error) {
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
	}
	return nil, nil, fmt.Errorf("bind udp+tcp on one port: %w", lastErr)
}

// Addr is "127.0.0.1:port", for UDP and TCP alike.
func (s *Server) Addr() string { return s.addr }

// Set programs name. It panics on a record that does not parse: a test
// typo should fail loudly.
func (s *Server) Set(name string, e Entry) {
	en := &entry{Entry: e, n: map[uint16]int{}}
	for _, set := range e.Answers {
		var rrs []dns.RR
		for _, z := range set {
			rr, err := dns.NewRR(z)
			if err != nil {
				panic(fmt.Sprintf("dnstest: record %q: %v", z, err))
			}
			rrs = append(rrs, rr)
		}
		en.sets = append(en.sets, rrs)
	}
	s.mu.Lock()
	s.entries[key(name)] = en
	s.mu.Unlock()
}

// SetRR programs name with one fixed record set.
func (s *Server) SetRR(name string, rrs ...string) {
	s.Set(name, Entry{Answers: [][]string{rrs}})
}

// Queries counts the queries received for name, all types and transports.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[key(name)]
}

func key(name string) string { return strings.ToLower(dns.Fqdn(name)) }

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(resp)
		return
	}
	q := req.Question[0]
	name := key(q.Name)
	_, udp := w.RemoteAddr().(*net.UDPAddr)

	s.mu.Lock()
	s.queries[name]++
	e := s.entries[name]
	var set []dns.RR
	var delay time.Duration
	if e != nil {
		delay = e.Delay
		if len(e.sets) > 0 {
			set = e.sets[e.n[q.Qtype]%len(e.sets)]
			e.n[q.Qtype]++
		}
	}
	var answer []dns.RR
	if e != nil && e.Rcode == 0 && !(udp && e.TruncateUDP) {
		depth := 0
		if e.NoFollow {
			depth = maxFollow
		}
		answer = s.collect(name, q.Qtype, set, depth)
	}
	s.mu.Unlock()

	if delay > 0 {
		time.Sleep(delay)
	}
	switch {
	case e == nil:
		resp.Rcode = dns.RcodeNameError
	case e.Rcode != 0:
		resp.Rcode = e.Rcode
	case udp && e.TruncateUDP:
		resp.Truncated = true
	default:
		resp.Answer = answer
	}
	if udp {
		// Like a real server: what does not fit the client's buffer is
		// truncated, and the client must retry over TCP.
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

// maxFollow bounds CNAME following inside the test server.
const maxFollow = 16

// collect picks the records of name that answer qtype from set, following
// CNAMEs into the set itself or into other programmed names. s.mu is held.
func (s *Server) collect(name string, qtype uint16, set []dns.RR, depth int) []dns.RR {
	if depth > maxFollow {
		return nil
	}
	var out []dns.RR
	for _, rr := range set {
		h := rr.Header()
		if key(h.Name) != name {
			continue
		}
		if h.Rrtype == qtype || qtype == dns.TypeANY {
			out = append(out, dns.Copy(rr))
			continue
		}
		if c, ok := rr.(*dns.CNAME); ok {
			out = append(out, dns.Copy(rr))
			target := key(c.Target)
			next := set
			if t, ok := s.entries[target]; ok && len(t.sets) > 0 {
				next = t.sets[t.n[qtype]%len(t.sets)]
			}
			out = append(out, s.collect(target, qtype, next, depth+1)...)
		}
	}
	return out
}
