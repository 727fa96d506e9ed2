package fdlimit

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// refused dials addr and reports whether the connection was closed by the
// server (a reset or EOF) rather than kept open; the deadline only guards
// against a hang, which is the bug.
func refused(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection to %s neither refused nor served within 10s", addr)
	}
	return err != nil
}

// TestListenerRefusesAndAuditsOnce: while the budget says descriptors are
// short, each new client is closed at once, every refusal is counted and
// only the first of the episode is audited; once descriptors are free
// again clients are admitted, and the next shortage is a new episode.
func TestListenerRefusesAndAuditsOnce(t *testing.T) {
	ln := listen(t)
	clk := newFakeClock()
	fc := newFakeCount(256, nil)
	rec := &audittest.Recorder{}
	var nRefused, nReleased int
	l := &Listener{
		Listener: ln, Raw: ln, Budget: newBudget(256, 32, fc.count, clk.now), Name: "proxy",
		Audit: rec, Log: zap.NewNop(),
		Release: func(net.Conn) { nReleased++ },
		Refused: func() { nRefused++ },
	}
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for i := range 5 {
		if !refused(t, ln.Addr().String()) {
			t.Fatalf("client %d was not refused with 256 of 256 descriptors open", i)
		}
	}
	recs := rec.Records()
	if len(recs) != 1 || recs[0].Kind != audit.KindAccept || recs[0].Reason != policy.ReasonFDExhausted.String() || recs[0].Decision != audit.DecisionDeny ||
		recs[0].Client != "127.0.0.1" || recs[0].Detail["listener"] != "proxy" || recs[0].Detail["limit"] != "256" {
		t.Errorf("audit records after 5 refusals = %+v; want one accept deny fd_exhausted record", recs)
	}

	fc.open.Store(10)
	clk.add(time.Millisecond)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := <-accepted
	sc.Close()

	fc.open.Store(256)
	clk.add(recount)
	if !refused(t, ln.Addr().String()) {
		t.Fatal("client not refused in a second shortage")
	}
	ln.Close()
	<-accepted
	if got := len(rec.Records()); got != 2 {
		t.Errorf("audit records after two episodes = %d; want 2", got)
	}
	if nRefused != 6 || nReleased != 6 {
		t.Errorf("Refused called %d times, Release %d; want 6 and 6", nRefused, nReleased)
	}
}

// emfile fails its first n Accepts as accept(2) does when the process is
// out of descriptors.
type emfile struct {
	net.Listener
	n int
}

func (l *emfile) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestListenerShedsWhenOutOfDescriptors: when accept fails with EMFILE
// the listener accepts the queued client with its spare descriptor and
// closes it at once, instead of returning the error (the server would
// back off and leave the client queued), and goes on accepting.
func TestListenerShedsWhenOutOfDescriptors(t *testing.T) {
	ln := listen(t)
	rec := &audittest.Recorder{}
	l := &Listener{Listener: &emfile{Listener: ln, n: 1}, Raw: ln, Name: "postgres", Audit: rec, Log: zap.NewNop()}
	defer l.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	next, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept() = %v; want the second client after shedding the first", err)
	}
	sc.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("shed client read = %v; want a reset or EOF", err)
	}
	next.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := next.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("admitted client read after the server closed it = %v; want EOF", err)
	}
	if recs := rec.Records(); len(recs) != 1 || recs[0].Reason != policy.ReasonFDExhausted.String() || recs[0].Detail["listener"] != "postgres" {
		t.Errorf("audit records = %+v; want one fd_exhausted record", recs)
	}
}

// TestSpareKeepsAccepting: when accept fails for want of descriptors, the
// admin listener's wrapper frees its spare and accepts the client instead
// of failing (the server would back off and leave it queued).
func TestSpareKeepsAccepting(t *testing.T) {
	ln := listen(t)
	s := NewSpare(&emfile{Listener: ln, n: 1})
	defer s.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := s.Accept()
	if err != nil {
		t.Fatalf("Accept() out of descriptors = %v; want the client, in the spare descriptor", err)
	}
	sc.Close()
	if s.spare != nil {
		t.Errorf("spare still held after it was used")
	}
	c2, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sc, err = s.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc.Close()
	if s.spare == nil {
		t.Errorf("spare not taken again after a later accept")
	}
}

// TestListenerWaitsWithoutSpare: with no socket to shed from, failures
// for want of descriptors are waited out, never returned (the Postgres
// gate's accept loop ends on an error it does not take for temporary,
// and egressd with it).
func TestListenerWaitsWithoutSpare(t *testing.T) {
	ln := listen(t)
	inner := &emfile{Listener: ln, n: 3}
	l := &Listener{Listener: inner, Name: "postgres", Audit: &audittest.Recorder{}, Log: zap.NewNop()}
	defer l.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := l.Accept()
	if err != nil || inner.n != 0 {
		t.Fatalf("Accept() after 3 EMFILE failures = %v (%d failures left); want the client", err, inner.n)
	}
	sc.Close()
}
