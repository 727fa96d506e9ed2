package proxy

import (
	"encoding/binary"
	"errors"
	"strings"
)

const (
	tlsRecordHandshake   = 22
	tlsHandshakeClient   = 1
	tlsRecordHeaderLen   = 5
	tlsMaxRecordLen      = 16384
	tlsExtServerName     = 0
	tlsServerNameTypeDNS = 0
	// tlsExtECH is encrypted_client_hello (RFC 9849), tlsExtESNI the
	// draft encrypted_server_name some clients still send: either hides
	// the name the client means behind the one in server_name.
	tlsExtECH  = 0xfe0d
	tlsExtESNI = 0xffce
)

var errMalformedHello = errors.New("malformed TLS ClientHello")

// isTLSRecordStart reports whether b begins like a TLS handshake record.
func isTLSRecordStart(b []byte) bool {
	return len(b) > 0 && b[0] == tlsRecordHandshake
}

// recordLen returns the payload length of the TLS record starting at hdr.
func recordLen(hdr []byte) (int, error) {
	if len(hdr) < tlsRecordHeaderLen || hdr[0] != tlsRecordHandshake || hdr[1] != 3 {
		return 0, errMalformedHello
	}
	n := int(binary.BigEndian.Uint16(hdr[3:5]))
	if n == 0 || n > tlsMaxRecordLen {
		return 0, errMalformedHello
	}
	return n, nil
}

// parseClientHelloSNI returns the server name of the ClientHello at the
// start of flight, "" when it sends none. A ClientHello not yet whole in
// flight is malformed.
func parseClientHelloSNI(flight []byte) (string, error) {
	var a helloAssembler
	msg, err := a.feed(flight)
	if err != nil {
		return "", err
	}
	if msg == nil {
		return "", errMalformedHello
	}
	return helloSNI(msg)
}

// helloSNI returns the server name of one whole ClientHello handshake
// message.
func helloSNI(msg []byte) (string, error) {
	h, err := parseHello(msg)
	return h.sni, err
}

// helloInfo is what the proxy checks in a ClientHello.
type helloInfo struct {
	sni string
	// ech marks an Encrypted Client Hello (or draft ESNI) extension.
	ech bool
}

// parseHello reads one whole ClientHello handshake message, each byte
// once.
func parseHello(msg []byte) (helloInfo, error) {
	if len(msg) < 4 || msg[0] != tlsHandshakeClient {
		return helloInfo{}, errMalformedHello
	}
	p := msg[4:]
	// client_version, random
	if len(p) < 34 {
		return helloInfo{}, errMalformedHello
	}
	p = p[34:]
	var ok bool
	if _, p, ok = cut8(p); !ok { // session_id
		return helloInfo{}, errMalformedHello
	}
	if _, p, ok = cut16(p); !ok { // cipher_suites
		return helloInfo{}, errMalformedHello
	}
	if _, p, ok = cut8(p); !ok { // compression_methods
		return helloInfo{}, errMalformedHello
	}
	if len(p) == 0 {
		return helloInfo{}, nil
	}
	exts, rest, ok := cut16(p)
	if !ok || len(rest) != 0 {
		return helloInfo{}, errMalformedHello
	}
	sni, found, ech := "", false, false
	for len(exts) > 0 {
		if len(exts) < 2 {
			return helloInfo{}, errMalformedHello
		}
		typ := binary.BigEndian.Uint16(exts)
		var data []byte
		if data, exts, ok = cut16(exts[2:]); !ok {
			return helloInfo{}, errMalformedHello
		}
		if typ == tlsExtECH || typ == tlsExtESNI {
			ech = true
		}
		if typ != tlsExtServerName {
			continue
		}
		if found {
			return helloInfo{}, errMalformedHello
		}
		found = true
		var err error
		if sni, err = parseServerNameExt(data); err != nil {
			return helloInfo{}, err
		}
	}
	return helloInfo{sni: sni, ech: ech}, nil
}

// parseServerNameExt returns the one host_name of a server_name extension.
func parseServerNameExt(data []byte) (string, error) {
	list, rest, ok := cut16(data)
	if !ok || len(rest) != 0 || len(list) == 0 {
		return "", errMalformedHello
	}
	name := ""
	for len(list) > 0 {
		typ := list[0]
		var v []byte
		if v, list, ok = cut16(list[1:]); !ok {
			return "", errMalformedHello
		}
		if typ != tlsServerNameTypeDNS {
			continue
		}
		if name != "" || len(v) == 0 {
			// RFC 6066 allows one host_name; two could make the check and
			// the upstream see different names.
			return "", errMalformedHello
		}
		name = string(v)
	}
	return name, nil
}

// sniMatches compares a ClientHello server name with the CONNECT host the
// policy decided, case-insensitively and ignoring one trailing dot.
func sniMatches(sni, host string) bool {
	return strings.EqualFold(strings.TrimSuffix(sni, "."), strings.TrimSuffix(host, "."))
}

func cut8(p []byte) (v, rest []byte, ok bool) {
	if len(p) < 1 || len(p) < 1+int(p[0]) {
		return nil, nil, false
	}
	n := int(p[0])
	return p[1 : 1+n], p[1+n:], true
}

func cut16(p []byte) (v, rest []byte, ok bool) {
	if len(p) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+n {
		return nil, nil, false
	}
	return p[2 : 2+n], p[2+n:], true
}
