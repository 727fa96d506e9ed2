// Package socks5 reads and writes the server side of a SOCKS5 handshake:
// the method greeting (RFC 1928), username/password authentication
// (RFC 1929) and the request, and writes the server's answers. It parses
// only; what a request may do is the proxy's decision.
//
// Every read is of exact, byte-bounded lengths (no field can ask for more
// than 255 bytes, a request is at most 262), so nothing past the handshake
// is consumed: the bytes after a request are the tunnel's. The caller sets
// the read deadlines.
package socks5

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// Version is the protocol version byte of SOCKS5 messages.
const Version = 5

// authVersion is RFC 1929's subnegotiation version.
const authVersion = 1

// Method is an authentication method of the greeting.
type Method byte

// The methods egressd offers, and the answer that none is acceptable.
const (
	MethodNoAuth       Method = 0x00
	MethodUserPass     Method = 0x02
	MethodNoAcceptable Method = 0xFF
)

// Command is a request's CMD.
type Command byte

// RFC 1928's commands; egressd serves only CommandConnect.
const (
	CommandConnect      Command = 1
	CommandBind         Command = 2
	CommandUDPAssociate Command = 3
)

// Reply is a reply's REP code.
type Reply byte

// RFC 1928's reply codes.
const (
	ReplySucceeded               Reply = 0x00
	ReplyGeneralFailure          Reply = 0x01
	ReplyNotAllowed              Reply = 0x02
	ReplyNetworkUnreachable      Reply = 0x03
	ReplyHostUnreachable         Reply = 0x04
	ReplyConnectionRefused       Reply = 0x05
	ReplyTTLExpired              Reply = 0x06
	ReplyCommandNotSupported     Reply = 0x07
	ReplyAddressTypeNotSupported Reply = 0x08
)

// Address types of a request.
const (
	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// Errors of the handshake. ErrAddressType is answered with
// ReplyAddressTypeNotSupported; the others end the connection.
var (
	ErrVersion     = errors.New("socks5: not a SOCKS5 message")
	ErrAuthVersion = errors.New("socks5: not an RFC 1929 username/password message")
	ErrNoMethods   = errors.New("socks5: greeting offers no method")
	ErrReserved    = errors.New("socks5: reserved byte not zero")
	ErrAddressType = errors.New("socks5: address type not supported")
	ErrEmptyDomain = errors.New("socks5: empty domain name")
)

// Greeting is the client's first message: the methods it offers.
type Greeting struct {
	Methods []Method
}

// ReadGreeting reads VER NMETHODS METHODS.
func ReadGreeting(r io.Reader) (Greeting, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Greeting{}, fmt.Errorf("socks5 greeting: %w", err)
	}
	if hdr[0] != Version {
		return Greeting{}, ErrVersion
	}
	if hdr[1] == 0 {
		return Greeting{}, ErrNoMethods
	}
	b := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, b); err != nil {
		return Greeting{}, fmt.Errorf("socks5 greeting methods: %w", err)
	}
	g := Greeting{Methods: make([]Method, len(b))}
	for i, m := range b {
		g.Methods[i] = Method(m)
	}
	return g, nil
}

// Offers reports whether the greeting offers m.
func (g Greeting) Offers(m Method) bool {
	for _, o := range g.Methods {
		if o == m {
			return true
		}
	}
	return false
}

// Append appends the greeting's wire form to b. It has at most 255
// methods; more are not encodable.
func (g Greeting) Append(b []byte) []byte {
	b = append(b, Version, byte(len(g.Methods)))
	for _, m := range g.Methods {
		b = append(b, byte(m))
	}
	return b
}

// WriteMethod answers a greeting with the method chosen, or
// MethodNoAcceptable.
func WriteMethod(w io.Writer, m Method) error {
	_, err := w.Write([]byte{Version, byte(m)})
	return err
}

// Credentials are RFC 1929's username and password.
type Credentials struct {
	User, Password string
}

// ReadCredentials reads VER ULEN UNAME PLEN PASSWD.
func ReadCredentials(r io.Reader) (Credentials, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Credentials{}, fmt.Errorf("socks5 auth: %w", err)
	}
	if hdr[0] != authVersion {
		return Credentials{}, ErrAuthVersion
	}
	user, err := readString(r, int(hdr[1]))
	if err != nil {
		return Credentials{}, fmt.Errorf("socks5 auth username: %w", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return Credentials{}, fmt.Errorf("socks5 auth: %w", err)
	}
	pass, err := readString(r, int(n[0]))
	if err != nil {
		return Credentials{}, fmt.Errorf("socks5 auth password: %w", err)
	}
	return Credentials{User: user, Password: pass}, nil
}

// Append appends the credentials' wire form to b; each field is at most
// 255 bytes, longer ones are not encodable.
func (c Credentials) Append(b []byte) []byte {
	b = append(b, authVersion, byte(len(c.User)))
	b = append(b, c.User...)
	b = append(b, byte(len(c.Password)))
	return append(b, c.Password...)
}

// WriteAuthStatus answers credentials: accepted or not. A client refused
// must close the connection, and the server does.
func WriteAuthStatus(w io.Writer, ok bool) error {
	status := byte(1)
	if ok {
		status = 0
	}
	_, err := w.Write([]byte{authVersion, status})
	return err
}

// Request is the client's request: a command and its destination, a
// domain name (Host, for egressd to resolve) or an address the client
// chose (Addr).
type Request struct {
	Command Command
	// Host is the domain name of an ATYP 3 request; "" otherwise.
	Host string
	// Addr is the address of an ATYP 1 or 4 request; invalid otherwise.
	Addr netip.Addr
	Port uint16
}

// ReadRequest reads VER CMD RSV ATYP DST.ADDR DST.PORT. An unknown
// address type is ErrAddressType, after which nothing of the request is
// read; the command is the caller's to refuse.
func ReadRequest(r io.Reader) (Request, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Request{}, fmt.Errorf("socks5 request: %w", err)
	}
	if hdr[0] != Version {
		return Request{}, ErrVersion
	}
	if hdr[2] != 0 {
		return Request{}, ErrReserved
	}
	q := Request{Command: Command(hdr[1])}
	switch hdr[3] {
	case atypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return Request{}, fmt.Errorf("socks5 request address: %w", err)
		}
		q.Addr = netip.AddrFrom4(a)
	case atypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return Request{}, fmt.Errorf("socks5 request address: %w", err)
		}
		q.Addr = netip.AddrFrom16(a)
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return Request{}, fmt.Errorf("socks5 request: %w", err)
		}
		if n[0] == 0 {
			return Request{}, ErrEmptyDomain
		}
		host, err := readString(r, int(n[0]))
		if err != nil {
			return Request{}, fmt.Errorf("socks5 request domain: %w", err)
		}
		q.Host = host
	default:
		return Request{}, ErrAddressType
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return Request{}, fmt.Errorf("socks5 request port: %w", err)
	}
	q.Port = binary.BigEndian.Uint16(p[:])
	return q, nil
}

// Authority is the request's destination as host:port: the domain name as
// sent, or the address (IPv6 in brackets, IPv4-mapped ones kept as sent).
func (q Request) Authority() string {
	if q.Addr.IsValid() {
		return netip.AddrPortFrom(q.Addr, q.Port).String()
	}
	return net.JoinHostPort(q.Host, strconv.Itoa(int(q.Port)))
}

// Append appends the request's wire form to b: the address when valid,
// else the domain name (at most 255 bytes).
func (q Request) Append(b []byte) []byte {
	b = append(b, Version, byte(q.Command), 0)
	switch {
	case q.Addr.Is4():
		a := q.Addr.As4()
		b = append(append(b, atypIPv4), a[:]...)
	case q.Addr.IsValid():
		a := q.Addr.As16()
		b = append(append(b, atypIPv6), a[:]...)
	default:
		b = append(b, atypDomain, byte(len(q.Host)))
		b = append(b, q.Host...)
	}
	return binary.BigEndian.AppendUint16(b, q.Port)
}

// WriteReply answers a request. The bound address is always 0.0.0.0:0:
// egressd does not tell the sandbox the address it dialled from.
func WriteReply(w io.Writer, rep Reply) error {
	_, err := w.Write([]byte{Version, byte(rep), 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// readString reads exactly n bytes (n <= 255: a length byte) as a string.
func readString(r io.Reader, n int) (string, error) {
	if n == 0 {
		return "", nil
	}
	var buf [255]byte
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
