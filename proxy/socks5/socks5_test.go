package socks5

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestReadRequest(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Request
		wantErr error
		auth    string
	}{
		{name: "domain", in: []byte{5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187},
			want: Request{Command: CommandConnect, Host: "example.com", Port: 443}, auth: "example.com:443"},
		{name: "ipv4", in: []byte{5, 1, 0, 1, 169, 254, 169, 254, 0, 80},
			want: Request{Command: CommandConnect, Addr: netip.MustParseAddr("169.254.169.254"), Port: 80}, auth: "169.254.169.254:80"},
		{name: "ipv6", in: append(append([]byte{5, 1, 0, 4}, netip.MustParseAddr("2001:db8::1").AsSlice()...), 0, 22),
			want: Request{Command: CommandConnect, Addr: netip.MustParseAddr("2001:db8::1"), Port: 22}, auth: "[2001:db8::1]:22"},
		{name: "ipv4-mapped ipv6 stays as sent", in: append(append([]byte{5, 1, 0, 4}, netip.MustParseAddr("::ffff:10.0.0.1").AsSlice()...), 0, 22),
			want: Request{Command: CommandConnect, Addr: netip.MustParseAddr("::ffff:10.0.0.1"), Port: 22}, auth: "[::ffff:10.0.0.1]:22"},
		{name: "bind parses; the server refuses it", in: []byte{5, 2, 0, 1, 1, 2, 3, 4, 0, 1},
			want: Request{Command: CommandBind, Addr: netip.MustParseAddr("1.2.3.4"), Port: 1}, auth: "1.2.3.4:1"},
		{name: "socks4", in: []byte{4, 1, 0, 80, 1, 2, 3, 4, 0}, wantErr: ErrVersion},
		{name: "reserved", in: []byte{5, 1, 1, 1, 1, 2, 3, 4, 0, 1}, wantErr: ErrReserved},
		{name: "address type", in: []byte{5, 1, 0, 9, 1, 2, 3, 4, 0, 1}, wantErr: ErrAddressType},
		{name: "empty domain", in: []byte{5, 1, 0, 3, 0, 0, 80}, wantErr: ErrEmptyDomain},
		{name: "short domain", in: []byte{5, 1, 0, 3, 20, 'a'}, wantErr: io.ErrUnexpectedEOF},
		{name: "no port", in: []byte{5, 1, 0, 1, 1, 2, 3, 4}, wantErr: io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.in)
			if tc.wantErr == nil {
				in = append(in, "tunnel"...)
			}
			r := bytes.NewReader(in)
			got, err := ReadRequest(r)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ReadRequest(%v) error = %v; want %v", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ReadRequest(%v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if got.Authority() != tc.auth {
				t.Errorf("Authority() = %q; want %q", got.Authority(), tc.auth)
			}
			// Nothing past the request is read: it is the tunnel's.
			if rest, _ := io.ReadAll(r); string(rest) != "tunnel" {
				t.Errorf("left after the request %q; want %q", rest, "tunnel")
			}
		})
	}
}

func TestReadGreetingAndCredentials(t *testing.T) {
	g, err := ReadGreeting(bytes.NewReader([]byte{5, 2, 0, 2}))
	if err != nil || !g.Offers(MethodNoAuth) || !g.Offers(MethodUserPass) || g.Offers(0x01) {
		t.Fatalf("ReadGreeting = %+v, %v; want no-auth and user/pass", g, err)
	}
	for _, bad := range []struct {
		in   []byte
		want error
	}{{[]byte{5, 0}, ErrNoMethods}, {[]byte{4, 1, 0}, ErrVersion}, {[]byte{5, 3, 0}, io.ErrUnexpectedEOF}} {
		if _, err := ReadGreeting(bytes.NewReader(bad.in)); !errors.Is(err, bad.want) {
			t.Errorf("ReadGreeting(%v) error = %v; want %v", bad.in, err, bad.want)
		}
	}
	long := strings.Repeat("t", 255)
	c, err := ReadCredentials(bytes.NewReader(Credentials{User: "agent", Password: long}.Append(nil)))
	if err != nil || c.User != "agent" || c.Password != long {
		t.Fatalf("ReadCredentials = %+v, %v; want agent and a 255-byte password", c, err)
	}
	if _, err := ReadCredentials(bytes.NewReader([]byte{5, 1, 'a', 1, 'b'})); !errors.Is(err, ErrAuthVersion) {
		t.Errorf("ReadCredentials(version 5) error = %v; want %v", err, ErrAuthVersion)
	}
}

func TestWrite(t *testing.T) {
	var b bytes.Buffer
	_ = WriteMethod(&b, MethodUserPass)
	_ = WriteAuthStatus(&b, false)
	_ = WriteReply(&b, ReplyCommandNotSupported)
	want := []byte{5, 2, 1, 1, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("written %v; want %v", b.Bytes(), want)
	}
}
