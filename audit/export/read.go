package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/egressd/egressd/audit"
)

// maxEventLine bounds one line of an exported file: an OCSF event or an
// OTLP JSON request. A record line is at most 1 MiB and JSON escaping can
// grow it sixfold; a collector's request holds many records.
const maxEventLine = 64 << 20

// eachLine calls fn with every line of r (without its newline), bounded.
func eachLine(r io.Reader, fn func(n int, line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		var line []byte
		for {
			chunk, err := br.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > maxEventLine {
				return fmt.Errorf("line %d: longer than %d bytes", n, maxEventLine)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(bytes.TrimSpace(line)) > 0 {
					return fn(n, bytes.TrimSuffix(line, []byte{'\r'}))
				}
				return nil
			}
			if err != nil {
				return err
			}
			break
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
}

// ReadOCSF feeds v the events of an OCSF JSON-lines stream, as the ocsf
// sink writes it. An event whose fields differ from the mapping of its
// embedded record line is an edit. It returns an error only for a line
// that is no OCSF event of egressd's (the stream is unreadable from there).
func ReadOCSF(r io.Reader, v *Verifier) error {
	return eachLine(r, func(n int, line []byte) error {
		var ev OCSFEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("line %d: not an OCSF event: %w", n, err)
		}
		u := ev.Unmapped
		if u.Hash == "" || ev.RawData == "" {
			return fmt.Errorf("line %d: not an egressd event: no raw_data or unmapped.egressd_hash", n)
		}
		v.Add(&Delivered{
			Where: fmt.Sprintf("line %d", n), Line: []byte(ev.RawData),
			Replica: u.Replica, Chain: u.Chain, Seq: u.Seq, Prev: u.Prev, Hash: u.Hash,
			Mapped: func(rec *audit.Record) []string {
				want := MapOCSF(&Event{Line: []byte(ev.RawData), Rec: *rec, Replica: u.Replica, Chain: u.Chain})
				// The exporter's version is not the record's.
				want.Metadata.Product.Version = ev.Metadata.Product.Version
				return diffJSON(want, ev)
			},
		})
		return nil
	})
}

// diffJSON names the top-level JSON fields in which a and b differ.
func diffJSON(a, b OCSFEvent) []string {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	var ma, mb map[string]json.RawMessage
	ja, _ := json.Marshal(a) //nolint:errchkjson // plain structs of strings and numbers
	jb, _ := json.Marshal(b) //nolint:errchkjson // plain structs of strings and numbers
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var out []string
	for k, va := range ma {
		if !bytes.Equal(va, mb[k]) {
			out = append(out, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ReadOTLPJSON feeds v the log records of an OTLP JSON file as the
// collector's file exporter writes it: one ExportLogsServiceRequest per
// line, decoded by the collector's own pdata unmarshaler. A record whose
// attributes or trace context differ from its body (the record line) is
// an edit.
func ReadOTLPJSON(r io.Reader, v *Verifier) error {
	var u plog.JSONUnmarshaler
	return eachLine(r, func(n int, line []byte) error {
		logs, err := u.UnmarshalLogs(line)
		if err != nil {
			return fmt.Errorf("line %d: not an OTLP JSON logs request: %w", n, err)
		}
		i := 0
		for _, rl := range logs.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					i++
					v.Add(delivered(fmt.Sprintf("line %d log %d", n, i), lr))
				}
			}
		}
		return nil
	})
}

func delivered(where string, lr plog.LogRecord) *Delivered {
	attrs := lr.Attributes()
	str := func(k string) string {
		if a, ok := attrs.Get(k); ok {
			return a.AsString()
		}
		return ""
	}
	var seq uint64
	if a, ok := attrs.Get(AttrSeq); ok && a.Type() == pcommon.ValueTypeInt && a.Int() > 0 {
		seq = uint64(a.Int())
	}
	return &Delivered{
		Where: where, Line: []byte(lr.Body().AsString()),
		Replica: str(AttrReplica), Chain: str(AttrChain), Seq: seq, Prev: str(AttrPrev), Hash: str(AttrHash),
		Mapped: func(rec *audit.Record) []string {
			var bad []string
			for _, kv := range [...]struct{ k, want string }{
				{AttrKind, string(rec.Kind)}, {AttrDecision, string(rec.Decision)}, {AttrReason, rec.Reason},
				{AttrRule, rec.Rule}, {AttrIdentity, rec.Identity},
			} {
				if str(kv.k) != kv.want {
					bad = append(bad, kv.k)
				}
			}
			if lr.Body().Type() != pcommon.ValueTypeStr {
				bad = append(bad, "body")
			}
			tid, sid := traceIDs(rec.Traceparent)
			if lr.TraceID() != tid || lr.SpanID() != sid {
				bad = append(bad, "trace context")
			}
			return bad
		},
	}
}

// traceIDs are the ids the exporter set from a recorded traceparent
// (zero when there is none), read by the same W3C propagator.
func traceIDs(tp string) (pcommon.TraceID, pcommon.SpanID) {
	sc := spanContext(tp)
	if !sc.IsValid() {
		return pcommon.TraceID{}, pcommon.SpanID{}
	}
	return pcommon.TraceID(sc.TraceID()), pcommon.SpanID(sc.SpanID())
}
