package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// upstreamPool sends bodyless requests on the calling goroutine: write the
// request, read the response head, hand the body back. net/http.Transport
// runs a read loop and a write loop goroutine per connection and passes
// every request and response between them over channels; for the common
// proxied GET that hand-off and its allocations are a large share of the
// proxy's CPU per request. Requests with a body (and Expect:
// 100-continue) go through a Transport with keep-alives off instead, which
// can read a response while the body is being sent.
//
// Measured against the Transport on the same dialer in 6 alternating
// rounds on a shared 2-core machine (medians): on this leg alone
// (BenchmarkUpstreamPath) the pool cost 0.66x the Transport's CPU per
// request serially and 0.64x with 8 concurrent requests; through the whole
// proxy (BenchmarkProxyHTTPKeepAlive, client and upstream in the same
// process) 0.88x. It speaks HTTP/1.1 only, and upstream HTTP/2, request
// bodies and trailers stay with the Transport.
//
// The plain-HTTP connection invariant lives here and in Server.newState:
// a connection is pooled per identity and upstream (poolKey), so no
// identity's request ever follows another's on a connection; only
// bodyless requests are pooled, since an upstream that answers without
// reading a body parses it as the next request (the Transport for bodies
// sends "Connection: close" and never reuses); and a connection that holds
// or receives a byte past its response, or answered a HEAD, 204 or 304
// declaring a body, is never reused (recycle, get).
//
// Connections come only from the pinned dialer, like the Transport's.
type upstreamPool struct {
	dial          func(ctx context.Context, network, address string) (net.Conn, error)
	maxPerHost    int
	maxIdle       int
	idleTimeout   time.Duration
	headerTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]*upConn // most recently used last
	nIdle  int
	closed bool
}

// upConn is one upstream connection with its buffers.
type upConn struct {
	p     *upstreamPool
	key   string
	c     net.Conn
	br    *bufio.Reader // reads through readLimited
	bw    *bufio.Writer
	ip    string      // the dialled address, for the audit record
	timer *time.Timer // closes the connection after idleTimeout in the pool
	idle  bool        // in the pool; guarded by p.mu
	// limit is what br may still read while a response head is read;
	// negative when no head is being read.
	limit int64
}

// maxResponseHeaderBytes caps a response head, as the Transport's
// MaxResponseHeaderBytes does on the other path: without it a 150 MB head
// is held in memory whole.
const maxResponseHeaderBytes = 1 << 20

var errResponseHeaderTooLarge = errors.New("response head larger than 1 MiB")

// readLimited is br's source: while a response head is read it hands out
// no more than the head's budget, so an endless head ends the request.
type readLimited upConn

func (r *readLimited) Read(p []byte) (int, error) {
	if r.limit < 0 {
		return r.c.Read(p)
	}
	if r.limit == 0 {
		return 0, errResponseHeaderTooLarge
	}
	if int64(len(p)) > r.limit {
		p = p[:r.limit]
	}
	n, err := r.c.Read(p)
	r.limit -= int64(n)
	return n, err
}

func newUpstreamPool(c Config, d Dialer) *upstreamPool {
	return &upstreamPool{
		dial:          d.DialContext,
		maxPerHost:    c.MaxIdleConnsPerHost,
		maxIdle:       c.MaxIdleConns,
		idleTimeout:   idleConnTimeout,
		headerTimeout: c.ResponseHeaderTimeout,
		idle:          make(map[string][]*upConn),
	}
}

// fastPathOK says whether r can go through the pool: a request without a
// body, of any method but CONNECT.
func fastPathOK(r *http.Request) bool {
	return r.Method != http.MethodConnect &&
		(r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 &&
		len(r.TransferEncoding) == 0 && r.Header.Get("Expect") == ""
}

// replayable says whether the bodyless r may be sent twice, as net/http
// decides it (Request.isReplayable): a GET, HEAD, OPTIONS or TRACE, or a
// request with an idempotency key. Only such a request takes a pooled
// connection, which the upstream may have closed meanwhile, and is then
// sent once more on a new one; any other goes on a fresh connection, which
// it may leave to the pool.
func replayable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := r.Header["Idempotency-Key"]
	_, xkey := r.Header["X-Idempotency-Key"]
	return key || xkey
}

// poolKey is the pool's key for identity's connections to addr
// ("host:port").
func poolKey(identity, addr string) string { return identity + " " + addr }

// roundTrip sends req for identity to addr ("host:port"). The response
// body returns the connection to identity's pool when read to EOF and
// closed.
func (p *upstreamPool) roundTrip(req *http.Request, identity, addr string) (*http.Response, string, error) {
	ctx := req.Context()
	key := poolKey(identity, addr)
	if replayable(req) {
		if pc := p.get(key); pc != nil {
			resp, err := p.send(ctx, pc, req)
			if err == nil || ctx.Err() != nil || isTimeout(err) {
				return resp, pc.ip, err
			}
			// The upstream closed the idle connection; the request is
			// replayable, so send it once more on a new one.
		}
	}
	c, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, "", err
	}
	pc := p.wrap(key, c)
	resp, err := p.send(ctx, pc, req)
	return resp, pc.ip, err
}

func (p *upstreamPool) wrap(key string, c net.Conn) *upConn {
	pc := &upConn{p: p, key: key, c: c, bw: bufio.NewWriterSize(c, 4<<10), limit: -1}
	pc.br = bufio.NewReaderSize((*readLimited)(pc), 16<<10)
	if ap, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		pc.ip = ap.AddrPort().Addr().Unmap().String()
	}
	pc.timer = time.AfterFunc(time.Hour, pc.expire)
	pc.timer.Stop()
	return pc
}

// send writes req on pc and reads the response head. On any error pc is
// closed.
func (p *upstreamPool) send(ctx context.Context, pc *upConn, req *http.Request) (*http.Response, error) {
	// A cancelled request (client gone, body idle timeout, shutdown)
	// closes the connection, which ends any read or write in progress.
	stop := context.AfterFunc(ctx, pc.close)
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if p.headerTimeout > 0 {
		pc.c.SetReadDeadline(time.Now().Add(p.headerTimeout))
	}
	if err := req.Write(pc.bw); err != nil {
		return fail(fmt.Errorf("write request: %w", err))
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(fmt.Errorf("write request: %w", err))
	}
	var resp *http.Response
	// The budget covers every head read, interim 1xx ones included, and
	// what br reads ahead of the body.
	pc.limit = maxResponseHeaderBytes
	for {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(fmt.Errorf("read response: %w", err))
		}
		if resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// Upgrade is stripped from every request; a 101 is a
			// protocol error.
			return fail(errors.New("read response: unexpected 101 Switching Protocols"))
		}
		// Interim 1xx responses (103 Early Hints) are not forwarded.
	}
	pc.limit = -1
	if p.headerTimeout > 0 {
		pc.c.SetReadDeadline(time.Time{})
	}
	reuse := !resp.Close && !req.Close && !bodylessWithLength(req, resp)
	if resp.Body == http.NoBody {
		pc.recycle(stop, reuse)
		return resp, nil
	}
	resp.Body = &upBody{ReadCloser: resp.Body, pc: pc, stop: stop, reuse: reuse}
	return resp, nil
}

// bodylessWithLength reports a response that has no body by its request or
// status (HEAD, 204, 304) yet declares one: an upstream that sends the body
// anyway leaves its bytes to be read as the next response. Its connection
// is closed on every transport (here, and httpFlow.RoundTrip for the
// Transports).
func bodylessWithLength(req *http.Request, resp *http.Response) bool {
	if req.Method != http.MethodHead && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		return false
	}
	cl := resp.Header.Get("Content-Length")
	return (cl != "" && cl != "0") || len(resp.TransferEncoding) > 0 || resp.Header.Get("Transfer-Encoding") != ""
}

// recycle returns pc to the pool once its response is fully read, unless
// the request was cancelled meanwhile (stop reports the AfterFunc already
// ran), either side asked to close, or the upstream sent more than the
// response: bytes past it are not a response to any request of ours. Bytes
// still on their way are found when the connection is taken (get).
func (pc *upConn) recycle(stop func() bool, reuse bool) {
	if !stop() || !reuse || pc.br.Buffered() > 0 {
		pc.close()
		return
	}
	pc.p.put(pc)
}

func (pc *upConn) close() { pc.c.Close() }

// get takes the most recently used idle connection to key that has
// nothing to read: bytes or an EOF that arrived while it sat idle were
// sent for no request, so the connection is closed rather than reused.
func (p *upstreamPool) get(key string) *upConn {
	for {
		pc := p.take(key)
		if pc == nil || quiet(pc.c) {
			return pc
		}
		pc.close()
	}
}

func (p *upstreamPool) take(key string) *upConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	if len(list) == 0 {
		return nil
	}
	pc := list[len(list)-1]
	list[len(list)-1] = nil
	p.idle[key] = list[:len(list)-1]
	p.nIdle--
	pc.idle = false
	pc.timer.Stop()
	return pc
}

// quiet reports whether c has nothing to read right now: no bytes, no EOF,
// no error. It asks the socket with a non-blocking MSG_PEEK, so nothing is
// consumed; a connection it cannot ask is not quiet.
func quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	idle := false
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = errors.Is(rerr, syscall.EAGAIN)
		return true
	})
	return err == nil && idle
}

func (p *upstreamPool) put(pc *upConn) {
	p.mu.Lock()
	list := p.idle[pc.key]
	if p.closed || len(list) >= p.maxPerHost || p.nIdle >= p.maxIdle {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.idle[pc.key] = append(list, pc)
	p.nIdle++
	pc.idle = true
	pc.timer.Reset(p.idleTimeout)
	p.mu.Unlock()
}

// expire closes pc if it is still idle when its timer fires.
func (pc *upConn) expire() {
	p := pc.p
	p.mu.Lock()
	if !pc.idle {
		p.mu.Unlock()
		return
	}
	p.removeLocked(pc)
	p.mu.Unlock()
	pc.close()
}

func (p *upstreamPool) removeLocked(pc *upConn) {
	list := p.idle[pc.key]
	for i, c := range list {
		if c == pc {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(p.idle, pc.key)
	} else {
		p.idle[pc.key] = list
	}
	p.nIdle--
	pc.idle = false
}

// closeIdle closes every pooled connection and keeps the pool closed, for
// shutdown.
func (p *upstreamPool) closeIdle() {
	p.mu.Lock()
	var all []*upConn
	for _, list := range p.idle {
		all = append(all, list...)
	}
	clear(p.idle)
	p.nIdle = 0
	p.closed = true
	for _, pc := range all {
		pc.idle = false
		pc.timer.Stop()
	}
	p.mu.Unlock()
	for _, pc := range all {
		pc.close()
	}
}

// upBody hands the connection back when the body has been read to EOF and
// closed; a body closed early closes the connection instead of draining it.
type upBody struct {
	io.ReadCloser
	pc     *upConn
	stop   func() bool
	reuse  bool
	eof    bool
	closed bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.eof {
		// Closing the connection first makes the body's Close, which
		// would otherwise drain what is left, return at once.
		b.stop()
		b.pc.close()
		b.ReadCloser.Close()
		return nil
	}
	err := b.ReadCloser.Close()
	b.pc.recycle(b.stop, b.reuse)
	return err
}
