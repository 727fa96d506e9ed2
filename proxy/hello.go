package proxy

import "errors"

// maxHelloFlight bounds the bytes read to reassemble a ClientHello, records
// and their headers included: a real one fits in one record, but a client
// may split it over several, and each record can hold up to 16 KiB.
const maxHelloFlight = 64 << 10

// maxHelloRecords caps the TLS records one ClientHello may span. A real one
// fits in one record, and clients that split it (some do, to get past
// middleboxes) use a handful; a flight of thousands of tiny records only
// makes the proxy work.
const maxHelloRecords = 256

var (
	errHelloTooLarge       = errors.New("TLS ClientHello larger than 64 KiB")
	errHelloTooManyRecords = errors.New("TLS ClientHello split over more than 256 records")
)

// helloAssembler reassembles the ClientHello handshake message from the TLS
// handshake records at the start of a flight as its bytes arrive. Each byte
// is looked at once: bytes fed earlier are never walked or copied again, so
// the work is linear in the flight whatever its framing (one-byte records
// included). The zero value is ready.
type helloAssembler struct {
	hdr     [tlsRecordHeaderLen]byte
	nhdr    int // bytes of hdr filled
	left    int // payload bytes of the current record still to come
	records int
	fed     int    // flight bytes taken, record headers included
	msg     []byte // the handshake message so far
	msgLen  int    // length of the whole message; 0 until its header is in
	// examined counts the bytes looked at or copied; it stays within the
	// flight's length plus the message's.
	examined int
}

// feed takes the next bytes of the flight. It returns the whole message
// once it is in (bytes after it are not looked at), nil before; an error
// means the flight is not a ClientHello the proxy accepts.
func (a *helloAssembler) feed(p []byte) ([]byte, error) {
	for len(p) > 0 {
		if a.left == 0 {
			k := copy(a.hdr[a.nhdr:], p)
			a.nhdr, a.fed, a.examined, p = a.nhdr+k, a.fed+k, a.examined+k, p[k:]
			if a.nhdr < len(a.hdr) {
				return nil, nil
			}
			a.nhdr = 0
			n, err := recordLen(a.hdr[:])
			if err != nil {
				return nil, err
			}
			if a.records++; a.records > maxHelloRecords {
				return nil, errHelloTooManyRecords
			}
			if a.fed+n > maxHelloFlight {
				return nil, errHelloTooLarge
			}
			a.left = n
			continue
		}
		// Take payload bytes up to the end of the record, the message
		// header or the message, whichever comes first.
		k := min(a.left, len(p))
		if a.msgLen == 0 {
			k = min(k, 4-len(a.msg))
		} else {
			k = min(k, a.msgLen-len(a.msg))
		}
		a.msg = append(a.msg, p[:k]...)
		a.left, a.fed, a.examined, p = a.left-k, a.fed+k, a.examined+k, p[k:]
		if a.msgLen == 0 && len(a.msg) == 4 {
			if a.msg[0] != tlsHandshakeClient {
				return nil, errMalformedHello
			}
			hl := int(a.msg[1])<<16 | int(a.msg[2])<<8 | int(a.msg[3])
			if 4+hl > maxHelloFlight {
				return nil, errHelloTooLarge
			}
			a.msgLen = 4 + hl
		}
		if a.msgLen != 0 && len(a.msg) == a.msgLen {
			return a.msg, nil
		}
	}
	return nil, nil
}
