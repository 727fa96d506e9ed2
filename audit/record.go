// Package audit owns the append-only, hash-chained decision log: the writer
// that every entry point queues records to before acting, the reader, and the
// verifier behind `egressd audit verify|show`.
package audit

import "time"

// Record is one line of the audit log. Zero-valued optional fields are
// omitted from the line. Seq, TS, Prev and Hash are set by the Writer.
type Record struct {
	Seq uint64    `json:"seq"`
	TS  time.Time `json:"ts"`
	// Kind is the decision kind, a completion, or a writer record; see
	// Kind.
	Kind     Kind   `json:"kind"`
	Request  string `json:"request,omitempty"`
	Identity string `json:"identity,omitempty"`
	// User is the name a client claimed in a credential that did not
	// authenticate it (never the secret), on 407 refusals.
	User   string `json:"user,omitempty"`
	Client string `json:"client,omitempty"`
	// Via says how a proxied connection arrived: ViaProxy (HTTP_PROXY
	// or CONNECT), ViaTransparent (redirected or DNS-steered to the
	// transparent listener) or ViaSOCKS; empty on DNS and SQL records.
	Via string `json:"via,omitempty"`
	// Traceparent is the W3C trace context the sandbox sent with a
	// request, as sent (validated), so a trace, this record and the
	// sandbox's evidence link up.
	Traceparent string `json:"traceparent,omitempty"`

	// Target fields; which are set depends on Kind.
	Method string `json:"method,omitempty"`
	Scheme string `json:"scheme,omitempty"`
	Host   string `json:"host,omitempty"`
	Port   uint16 `json:"port,omitempty"`
	Path   string `json:"path,omitempty"`
	// Query is the raw query string with the values of sensitive
	// parameters (Config.RedactQueryParams) replaced by [redacted:N].
	Query string `json:"query,omitempty"`
	// Inspected marks a request decided inside a terminated (inspected)
	// CONNECT tunnel, and that tunnel's own records.
	Inspected   bool   `json:"inspected,omitempty"`
	Name        string `json:"name,omitempty"`
	QType       string `json:"qtype,omitempty"`
	Database    string `json:"database,omitempty"`
	SQL         string `json:"sql,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	IP          string `json:"ip,omitempty"`

	Decision Decision `json:"decision,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Rule     string   `json:"rule,omitempty"`
	Policy   string   `json:"policy,omitempty"`
	// WouldDeny is set on an allow that an observe mode let through: the
	// reason the decision would have denied with. Rule names the rule
	// that would have denied ("" when none matched).
	WouldDeny string `json:"would_deny,omitempty"`
	// ObservedBy says whose observe mode let it through: "rule",
	// "identity" or "bundle". Set exactly when WouldDeny is.
	ObservedBy string `json:"observed_by,omitempty"`
	// Credentials names each secret the proxy added to the request and
	// where ("header:Authorization", "query:key"; several joined by ","),
	// never a value; the target fields hold the request as the sandbox
	// sent it, placeholders and all.
	Credentials map[string]string `json:"credentials,omitempty"`
	// Fields of what a request carried, set where a rule decided on its
	// body or a scan looked at it; never the body itself.
	//
	// MCPMethod is the JSON-RPC method of an MCP request ("tools/call");
	// several of a batch joined by ",".
	MCPMethod string `json:"mcp_method,omitempty"`
	// Tool is the tool of an MCP tools/call (several joined by ",").
	Tool string `json:"tool,omitempty"`
	// RPCID is the JSON-RPC id as the client sent it (JSON text).
	RPCID string `json:"rpc_id,omitempty"`
	// ArgsHMAC is the HMAC-SHA256 (hex) of a tools/call's arguments as
	// sent, keyed with the replica's local key: equal arguments compare
	// equal without the record revealing short ones.
	ArgsHMAC string `json:"args_hmac,omitempty"`
	// Model is the model a model API request named.
	Model string `json:"model,omitempty"`
	// TokensIn and TokensOut are a model API response's usage.
	TokensIn  int64 `json:"tokens_in,omitempty"`
	TokensOut int64 `json:"tokens_out,omitempty"`
	// Secret names the loaded secret whose value a request carried.
	Secret string `json:"secret,omitempty"`
	// SecretPattern names the secret patterns a request matched
	// (comma-separated), recorded whether or not they refused it.
	SecretPattern string `json:"secret_pattern,omitempty"`

	// Completion fields.
	Status     int    `json:"status,omitempty"`
	BytesIn    int64  `json:"bytes_in,omitempty"`
	BytesOut   int64  `json:"bytes_out,omitempty"`
	DurationUS int64  `json:"duration_us,omitempty"`
	Error      string `json:"error,omitempty"`

	// Count is set on an aggregate refusal record: how many refusals of
	// this kind, identity (or client) and reason the Meter folded into it.
	Count int64 `json:"count,omitempty"`
	// Truncated names the fields (comma-separated) that were cut to
	// Config.MaxFieldBytes.
	Truncated string `json:"truncated,omitempty"`

	// Detail carries writer records' extra facts (byte offset of a torn
	// tail, the previous segment, a signature).
	Detail map[string]string `json:"detail,omitempty"`

	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// How a proxied connection reached egressd (Record.Via).
const (
	ViaProxy       = "proxy"
	ViaTransparent = "transparent"
	ViaSOCKS       = "socks"
)

// Kinds of the records the writer itself adds.
const (
	// KindSegment is the first record of every segment file. Its prev is
	// the last hash of the previous segment; Detail["previous"] names that
	// file, Detail["reason"] says why the segment began (start, rotate,
	// recovered_torn_tail, sync_error, accepted_break) and Detail["torn"]
	// lists unterminated lines left behind as "file@offset".
	KindSegment Kind = "segment"
	// KindCheckpoint is a signed statement of the chain head: Detail
	// "seq" and "hash" of the record before it, "sig" (base64 Ed25519) and
	// "key" (the first 8 bytes of the public key, hex).
	KindCheckpoint Kind = "checkpoint"
	// KindResumed follows an outage: Detail "error", "since", "refused".
	KindResumed Kind = "resumed"
	// KindAcceptedBreak records that the operator started egressd past a
	// broken chain: Detail "file", "line", "seq", "error".
	KindAcceptedBreak Kind = "accepted_break"
	// KindStarted is written by egressd on every start, so a restart shows
	// in the chain even when the last segment ended cleanly: Detail
	// "version", "config" (SHA-256 of the config file, or "embedded") and
	// "policy" (the bundle digest).
	KindStarted Kind = "started"
	// KindGrant records a time-bound grant created, revoked or expired:
	// Identity, the target fields (method, host, port, path) and Rule
	// ("grant:ID") say what it allows; Detail "event" (created, revoked,
	// expired), "id", "by" (the admin client that created or revoked it;
	// none on expiry), "expires" (RFC 3339), "from_request" (the denied
	// request it was made from, if any) and "tunnel" ("true" for a
	// host-wide grant that opens tunnels).
	KindGrant Kind = "grant"
)

// Appender is what entry points need of the log. Append returns only once the
// record is queued (or durable, with sync: always); an error means the caller
// must deny with reason "audit_unavailable". Append does not keep r: the
// caller may reuse it once Append returns (the maps it holds are shared
// and must not change).
type Appender interface {
	Append(r *Record) error
}
