package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// tunnel is one established tunnel: a CONNECT, a SOCKS5 CONNECT, or a
// transparent connection.
type tunnel struct {
	s      *Server
	f      *flowInfo
	client net.Conn
	up     net.Conn
	ip     string
	// early is what the client sent along with its CONNECT head; it comes
	// before anything read from client.
	early []byte
	// What the tunnel was allowed on, re-decided after a reload.
	identity  policy.Identity
	cred      credential
	authority string
	addr      netip.AddrPort
	// arrival is how the client reached egressd and is answered.
	arrival arrival
	// echNeedsInspection refuses an Encrypted Client Hello (GREASE too)
	// unless the tunnel is inspected: the transparent listener's.
	echNeedsInspection bool

	up2down, down2up atomic.Int64
	lastActive       atomic.Int64 // unix nanos
	closeOnce        sync.Once
	closed           atomic.Bool
	// opened is when the client was told the tunnel is open; a TLS-only
	// tunnel's first flight is waited for peek_timeout from then.
	opened time.Time
	// An opaque tunnel's run (tunnelrun.go): its directions, how many of
	// them still run, its idle and lifetime timer, its end of life and
	// what its opener left to do once it ends. mu guards the directions'
	// kicks and the timer.
	mu             sync.Mutex
	toUp, toClient *direction
	live           atomic.Int32
	timer          *time.Timer
	end            time.Time
	done           func()
	// refused is the first-flight refusal reason, if any; refusedDetail
	// says more, or alone says why an inspected tunnel ended early.
	refused       policy.Reason
	refusedDetail string
	// revoked is the reason a reload closed the tunnel, if it did.
	revoked atomic.Pointer[policy.Reason]
	// inner serves an inspected tunnel's requests; nil until then.
	inner atomic.Pointer[http.Server]
}

// checkFirstFlight reads the client's first bytes before anything of the
// client's goes upstream: a ClientHello naming another server than the
// CONNECT host is refused (sni_mismatch), and so are non-TLS bytes when the
// rule is TLS-only; a plaintext tunnel whose bytes read as HTTP has each
// of its requests bound to the CONNECT host (checkPlainFlight). What was
// read is then written upstream unchanged. It reports whether the rest of
// the client-to-upstream direction may be piped.
func (t *tunnel) checkFirstFlight(tlsOnly bool) bool {
	return t.firstFlight(tlsOnly, func(flight []byte, early *bytes.Reader, _ helloInfo) bool {
		return t.forwardFlight(flight, early)
	})
}

// firstFlight waits for the client's first bytes and reads them up to a
// whole ClientHello, refusing what checkFirstFlight refuses; onHello gets
// the bytes read (flight, then what is left of early) and the hello once
// its server name matched. It reports what onHello reports, or false.
func (t *tunnel) firstFlight(tlsOnly bool, onHello func(flight []byte, early *bytes.Reader, h helloInfo) bool) bool {
	deadline := time.Now().Add(t.s.cfg.TunnelIdleTimeout)
	if tlsOnly {
		deadline = t.peekDeadline()
	}
	t.client.SetReadDeadline(deadline)
	// Wait before taking a buffer: idle tunnels should not each hold one.
	if len(t.early) == 0 {
		if err := waitReadable(t.client); err != nil {
			if !tlsOnly && (isTimeout(err) || t.closed.Load()) {
				// Idle, or ended by its timer (an opaque tunnel's wait is
				// its parking): a silent client was refused nothing.
				return false
			}
			return t.auditFlightRefusal(policy.ReasonTLSRequired, "no first bytes: "+err.Error())
		}
	}
	var src io.Reader = t.client
	var early *bytes.Reader
	if len(t.early) != 0 {
		early = bytes.NewReader(t.early)
		src = io.MultiReader(early, t.client)
	}
	bp := flightBufs.Get().(*[]byte)
	defer flightBufs.Put(bp)
	// The first read tells TLS from anything else: a client of another
	// protocol that sends fewer bytes than a record header and waits for
	// an answer must not be held until a timeout.
	flight, err := readSome((*bp)[:0], src)
	if len(flight) == 0 {
		// EOF before any byte: nothing to check or forward.
		return false
	}
	if !isTLSRecordStart(flight) {
		if tlsOnly {
			return t.auditFlightRefusal(policy.ReasonTLSRequired, "")
		}
		return t.checkPlainFlight(flight, err, early)
	}
	flight, h, reason, detail := readHello(flight, err, src)
	if reason != "" {
		return t.auditFlightRefusal(reason, detail)
	}
	if h.sni != "" && !sniMatches(h.sni, t.f.target.Host) {
		return t.auditFlightRefusal(policy.ReasonSNIMismatch, "sni "+h.sni)
	}
	if h.ech && t.echNeedsInspection && !t.f.inspected {
		// Without termination the SNI is the only name egressd sees, and
		// under ECH it is not the name the client reaches.
		return t.auditFlightRefusal(policy.ReasonEncryptedClientHello, "ECH extension on a transparent connection; only an inspecting rule serves it")
	}
	return onHello(flight, early, h)
}

// readHello reads from src, after flight (the bytes read so far, starting
// a TLS record; err the error of the read that returned them), up to a
// whole ClientHello of at most maxHelloFlight bytes, and parses it. It
// returns every byte read, and the refusal reason and its detail when the
// bytes are not one well-formed ClientHello.
func readHello(flight []byte, err error, src io.Reader) ([]byte, helloInfo, policy.Reason, string) {
	var a helloAssembler
	hello, ferr := a.feed(flight)
	for hello == nil && ferr == nil {
		if err != nil {
			return flight, helloInfo{}, policy.ReasonMalformedClientHello, "incomplete ClientHello: " + err.Error()
		}
		if len(flight) >= maxHelloFlight {
			return flight, helloInfo{}, policy.ReasonMalformedClientHello, errHelloTooLarge.Error()
		}
		n := len(flight)
		flight, err = readSome(flight, src)
		hello, ferr = a.feed(flight[n:])
	}
	if ferr != nil {
		return flight, helloInfo{}, policy.ReasonMalformedClientHello, ferr.Error()
	}
	h, perr := parseHello(hello)
	if perr != nil {
		return flight, helloInfo{}, policy.ReasonMalformedClientHello, perr.Error()
	}
	return flight, h, "", ""
}

var errFlightTooLarge = errors.New("first flight larger than 64 KiB")

// flightBufs hold one whole TLS record, enough for a usual first flight; a
// ClientHello split over more grows its own buffer up to maxHelloFlight.
var flightBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, tlsRecordHeaderLen+tlsMaxRecordLen)
	return &b
}}

// readSome appends to b what one read of src returns, retrying reads that
// return nothing, and grows b (up to maxHelloFlight) when it is full. The
// bytes are appended even when err is not nil.
func readSome(b []byte, src io.Reader) ([]byte, error) {
	if len(b) >= maxHelloFlight {
		return b, errFlightTooLarge
	}
	if len(b) == cap(b) {
		b = slices.Grow(b, min(max(cap(b), 4<<10), maxHelloFlight-len(b)))
	}
	for {
		n, err := src.Read(b[len(b):min(cap(b), maxHelloFlight)])
		b = b[:len(b)+n]
		if n > 0 || err != nil {
			return b, err
		}
	}
}

// forwardFlight writes upstream the bytes read from the client and then any
// early bytes the reads did not reach, so the raw connection is next in the
// client's stream.
func (t *tunnel) forwardFlight(b []byte, early *bytes.Reader) bool {
	if early != nil && early.Len() > 0 {
		rest := make([]byte, early.Len())
		_, _ = early.Read(rest) // a bytes.Reader of exactly len(rest) bytes
		b = append(b, rest...)
	}
	if len(b) == 0 {
		return true
	}
	if _, err := t.up.Write(b); err != nil {
		return false
	}
	t.down2up.Add(int64(len(b)))
	t.lastActive.Store(time.Now().UnixNano())
	return true
}

// auditFlightRefusal audits a first-flight refusal. The client already has its
// 200, so the refusal is the closed connection and the audit records.
func (t *tunnel) auditFlightRefusal(reason policy.Reason, detail string) bool {
	if t.revoked.Load() != nil {
		// The check failed because a reload closed the connection; the
		// completion record carries that reason.
		return false
	}
	if err := t.s.auditDecision(t.f, verdict{Verdict: audit.Verdict{Reason: reason}, detail: detail}); err != nil {
		t.s.log.Error("audit append failed", zap.String("request", t.f.id), zap.Error(err))
	}
	t.refused, t.refusedDetail = reason, detail
	return false
}

// completeRun counts the bytes of a tunnel that ran and appends its
// completion record: closed by a reload, refused on its first flight, or ended.
func (t *tunnel) completeRun() {
	t.s.metrics.tunnelBytes.WithLabelValues("up").Add(float64(t.down2up.Load()))
	t.s.metrics.tunnelBytes.WithLabelValues("down").Add(float64(t.up2down.Load()))
	if r := t.revoked.Load(); r != nil {
		detail := "closed by a reload"
		if *r == policy.ReasonShuttingDown {
			detail = drainCutDetail
		}
		t.complete(0, *r, detail)
		return
	}
	if t.refused != "" {
		t.complete(statusForReason(http.StatusForbidden, t.refused), t.refused, t.refusedDetail)
		return
	}
	// An error that refused nothing (an inspected client's failed
	// handshake) is detail alone.
	t.complete(0, "", t.refusedDetail)
}

// waitReadable blocks until src has bytes (or EOF, or an error) or its read
// deadline passes, without reading: MSG_PEEK asks the socket itself, so
// bytes left over from an earlier read are seen too.
func waitReadable(src net.Conn) error {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(err, syscall.EAGAIN)
	})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// recheck decides the open tunnel again under a reloaded state: its
// credential must still name its identity (not removed, token not rotated),
// the policy must still allow its CONNECT, and the floor its dialled
// address. It returns the deny reason, or "".
func (t *tunnel) recheck(ctx context.Context, st *state) policy.Reason {
	id, _, reason := reauthenticate(st.ids, t.identity.ID, t.cred)
	if reason != "" {
		return reason
	}
	out := st.decider.DecideConnect(ctx, id, t.authority)
	if !out.Decision.Allow {
		return outcomeRefusal(&out).Reason
	}
	if out.Decision.Inspect && !t.f.inspected {
		// The host-wide rule that opened it may be gone: an inspecting
		// rule allows requests, not an opaque tunnel.
		return policy.ReasonInspectionRequired
	}
	if !t.addr.IsValid() {
		// An inspected tunnel dials per request, and each dial is vetted.
		return ""
	}
	if err := st.decider.Floor.Check(t.addr.Addr(), t.addr.Port()); err != nil {
		return refusalFor(stageDial, policy.Decision{}, err).Reason
	}
	return ""
}

// revoke closes the tunnel; its completion record carries reason.
func (t *tunnel) revoke(reason policy.Reason) {
	t.revoked.Store(&reason)
	t.close()
}

// close ends the tunnel from either side (idle, lifetime, error, drain).
func (t *tunnel) close() {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		t.client.Close()
		if t.up != nil {
			t.up.Close()
		}
		t.kickParked()
	})
}

// peekDeadline is when a TLS-only tunnel's first flight is late:
// peek_timeout after the client was told the tunnel is open.
func (t *tunnel) peekDeadline() time.Time {
	return t.opened.Add(t.s.cfg.PeekTimeout)
}

// complete appends the tunnel's completion record.
func (t *tunnel) complete(status int, reason policy.Reason, detail string) {
	r := t.f.record(audit.KindConnectDone)
	r.IP = t.ip
	r.Status = status
	r.BytesOut = t.down2up.Load()
	r.BytesIn = t.up2down.Load()
	r.DurationUS = time.Since(t.f.start).Microseconds()
	r.Error = detail
	if reason != "" {
		r.Decision, r.Reason = audit.DecisionDeny, string(reason)
		if status != http.StatusForbidden {
			t.s.metrics.decided(audit.KindConnect, r.Decision, reason)
		}
	}
	if err := t.s.audit.Append(r); err != nil {
		t.s.log.Error("audit append failed", zap.String("request", t.f.id), zap.Error(err))
	}
	if !t.f.inspected {
		// An inspected tunnel's requests are counted one by one.
		t.s.countBytes(t.s.state.Load().ids, t.identity.ID, r.BytesIn+r.BytesOut)
	}
}
