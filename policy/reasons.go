package policy

import (
	"net/http"

	"github.com/miekg/dns"
)

// The reasons Go code decides, declared once. Each is in reasonTable with
// its class.
const (
	// Reasons of the engine, when Rego gives no usable answer.
	ReasonNoFacts           Reason = "no_facts"
	ReasonNoDecision        Reason = "no_decision"
	ReasonMalformedDecision Reason = "malformed_decision"
	ReasonPolicyError       Reason = "policy_error"
	ReasonPolicyTimeout     Reason = "policy_timeout"
	// ReasonNoMatchingRule is a deny whose decision named no reason.
	ReasonNoMatchingRule Reason = "no_matching_rule"
	// ReasonRuleDeny is the reason of a rule with action "deny": the rule
	// index writes it into the rule's view (see buildIndex).
	ReasonRuleDeny Reason = "rule_deny"
	// ReasonGrantExpired refuses what only an expired grant would allow,
	// in the moment before the grant is taken out of the bundle.
	ReasonGrantExpired Reason = "grant_expired"

	// Reasons of the URL and CONNECT target parsers.
	ReasonMalformedURL      Reason = "malformed_url"
	ReasonMalformedHost     Reason = "malformed_host"
	ReasonMalformedPort     Reason = "malformed_port"
	ReasonMalformedMethod   Reason = "malformed_method"
	ReasonUnsupportedScheme Reason = "unsupported_scheme"
	ReasonTargetTooLong     Reason = "target_too_long"
	ReasonHostTooLong       Reason = "host_too_long"
	ReasonPathTooLong       Reason = "path_too_long"

	// Reasons of the address floor: one per category of address it
	// refuses, and the internal: rules.
	ReasonLoopbackAddress        Reason = "loopback_address"
	ReasonPrivateAddress         Reason = "private_address"
	ReasonLinkLocalAddress       Reason = "link_local_address"
	ReasonCGNATAddress           Reason = "cgnat_address"
	ReasonULAAddress             Reason = "ula_address"
	ReasonMulticastAddress       Reason = "multicast_address"
	ReasonUnspecifiedAddress     Reason = "unspecified_address"
	ReasonBroadcastAddress       Reason = "broadcast_address"
	ReasonDocumentationAddress   Reason = "documentation_address"
	ReasonBenchmarkingAddress    Reason = "benchmarking_address"
	ReasonReservedAddress        Reason = "reserved_address"
	ReasonThisNetworkAddress     Reason = "this_network_address"
	ReasonMetadataAddress        Reason = "metadata_address"
	ReasonUnknownAddress         Reason = "unknown_address"
	ReasonZonedAddress           Reason = "zoned_address"
	ReasonInternalDenied         Reason = "internal_denied"
	ReasonInternalPortNotAllowed Reason = "internal_port_not_allowed"
	// ReasonMalformedAddress and ReasonInvalidPort refuse an address the
	// dialer cannot read.
	ReasonMalformedAddress Reason = "malformed_address"
	ReasonInvalidPort      Reason = "invalid_port"
	// ReasonAddressDenied ends a Postgres session whose upstream address
	// the floor no longer allows, when the floor gave no reason.
	ReasonAddressDenied Reason = "address_denied"

	// Reasons of DNS names and lookups.
	ReasonMetadataName      Reason = "metadata_name"
	ReasonIPLiteralName     Reason = "ip_literal_name"
	ReasonMalformedName     Reason = "malformed_name"
	ReasonNameTooLong       Reason = "name_too_long"
	ReasonLabelTooLong      Reason = "label_too_long"
	ReasonPolicyDenied      Reason = "policy_denied"
	ReasonQTypeNotAllowed   Reason = "qtype_not_allowed"
	ReasonQClassNotAllowed  Reason = "qclass_not_allowed"
	ReasonUnknownClient     Reason = "unknown_client"
	ReasonCNAMEChainTooLong Reason = "cname_chain_too_long"
	ReasonDNSFailure        Reason = "dns_failure"
	ReasonDNSNXDomain       Reason = "dns_nxdomain"
	ReasonDNSNoAddress      Reason = "dns_no_address"

	// Reasons of the HTTP proxy.
	ReasonProxyAuthRequired           Reason = "proxy_auth_required"
	ReasonProxyAuthInvalid            Reason = "proxy_auth_invalid"
	ReasonIdentityRevoked             Reason = "identity_revoked"
	ReasonHTTPSRequiresConnect        Reason = "https_requires_connect"
	ReasonNotProxyRequest             Reason = "not_proxy_request"
	ReasonMalformedRequest            Reason = "malformed_request"
	ReasonHeadersTooLarge             Reason = "headers_too_large"
	ReasonUnsupportedHTTPVersion      Reason = "unsupported_http_version"
	ReasonUnsupportedTransferEncoding Reason = "unsupported_transfer_encoding"
	ReasonExpectationFailed           Reason = "expectation_failed"
	ReasonIncompleteRequest           Reason = "incomplete_request"
	// ReasonRequestBodyNotAllowed: a GET, HEAD, OPTIONS or TRACE that carries a
	// body an upstream may ignore and read as a second request.
	ReasonRequestBodyNotAllowed Reason = "request_body_not_allowed"
	ReasonRedirectDenied        Reason = "redirect_denied"
	ReasonSNIMismatch           Reason = "sni_mismatch"
	ReasonTLSRequired           Reason = "tls_required"
	ReasonMalformedClientHello  Reason = "malformed_client_hello"
	ReasonTunnelHostMismatch    Reason = "tunnel_host_mismatch"
	// ReasonUnsupportedCommand refuses a SOCKS5 request other than CONNECT
	// (BIND, UDP ASSOCIATE): egressd opens only TCP tunnels it dials.
	ReasonUnsupportedCommand Reason = "unsupported_command"
	// ReasonSNIRequired refuses a TLS connection to the transparent
	// listener whose ClientHello names no server: the name is what the
	// policy decides there.
	ReasonSNIRequired Reason = "sni_required"
	// ReasonDestinationMismatch refuses a transparent connection whose
	// original destination is not an address egressd's DNS gave that
	// client for the name its first flight carries (a client that
	// resolved the name itself, or sent another name than it dialled).
	ReasonDestinationMismatch Reason = "destination_mismatch"
	// ReasonHostMismatch: a request's Host names another host or port
	// than its target, or than its inspected tunnel (domain fronting).
	// The bundle refuses the flag of the same name for plain requests;
	// inside an inspected tunnel Go refuses it before the bundle.
	ReasonHostMismatch Reason = "host_mismatch"
	// ReasonEncryptedClientHello refuses an inspected tunnel whose ClientHello carries
	// Encrypted Client Hello without an outer server name to check against
	// the CONNECT host (an ECH whose outer name is the CONNECT host is
	// served: egressd terminates TLS and answers the outer name).
	ReasonEncryptedClientHello Reason = "encrypted_client_hello"
	// ReasonUpstreamTLS: the TLS handshake with the upstream of an
	// inspected tunnel failed (certificate not valid for the host, not
	// signed by a trusted root); never downgraded to plaintext.
	ReasonUpstreamTLS Reason = "upstream_tls"
	// ReasonInspectUnavailable refuses a CONNECT a rule asks to inspect
	// when no leaf can be minted for it (no CA configured, or minting
	// failed): it is not opened as an opaque tunnel instead.
	ReasonInspectUnavailable Reason = "inspect_unavailable"
	// ReasonInspectionRequired closes an opaque tunnel when a reload made a
	// rule inspect its host: its requests must now be decided one by one,
	// so the client reconnects into an inspected tunnel.
	ReasonInspectionRequired Reason = "inspection_required"
	ReasonRateLimited        Reason = "rate_limited"
	ReasonIdentityConnLimit  Reason = "identity_conn_limit"
	// ReasonSourceRateLimited refuses a client address that was refused before
	// authentication more than proxy.per_source_refusal_rate allows.
	ReasonSourceRateLimited   Reason = "source_rate_limited"
	ReasonFDExhausted         Reason = "fd_exhausted"
	ReasonUpstreamTimeout     Reason = "upstream_timeout"
	ReasonUpstreamUnreachable Reason = "upstream_unreachable"
	ReasonShuttingDown        Reason = "shutting_down"
	// ReasonClientClosed completes a request whose client hung up.
	ReasonClientClosed Reason = "client_closed"

	// Reasons of credential brokering: the proxy adds a secret the sandbox
	// never holds, only where the allowing rule binds it.
	//
	// ReasonCredentialUnresolved: the request carries a placeholder
	// (egressd:secret:NAME) that no action of its rule substitutes there,
	// or the rule's secret is not loaded.
	ReasonCredentialUnresolved Reason = "credential_unresolved"
	// ReasonCredentialWrongDestination: a placeholder names a secret the rule
	// that allowed the request does not bind: it is not for this host.
	ReasonCredentialWrongDestination Reason = "credential_wrong_destination"
	// ReasonCredentialLiteral: a "require" action's place carries a value
	// of the sandbox's own instead of the placeholder (a pasted real key).
	ReasonCredentialLiteral Reason = "credential_literal"
	// ReasonCredentialCleartext: the rule binds a secret but the request
	// would carry it unencrypted to an address no internal: entry allows.
	ReasonCredentialCleartext Reason = "credential_cleartext"
	// ReasonCredentialUnsafeRequest: a request of a rule that binds a
	// secret asks for an answer the scrubber cannot vouch for: TRACE
	// (the request, secret and all, echoed as message/http) or a Range
	// (pieces that each hold part of the secret) where no action of the
	// rule allows ranges.
	ReasonCredentialUnsafeRequest Reason = "credential_unsafe_request"
	// ReasonCredentialUnscrubbable: the response to a request of a rule
	// that binds a secret cannot be passed on without the risk of the
	// secret in it: a textual body in an encoding egressd does not decode
	// (or over the decompressed cap), more than one Content-Type, or a
	// non-textual body (or its unlabelled gzip content) holding a secret,
	// which is refused rather than rewritten.
	ReasonCredentialUnscrubbable Reason = "credential_unscrubbable"
	// Reasons of what a request carries (its body, its size, what it
	// spends), decided where a rule asks for it (see rego/README.md).
	//
	// ReasonBodyTooLarge: the body is over the rule's max_body_bytes (read
	// to decide on it) or max_request_bytes (counted as it streams); also
	// a gzip body whose compressed or decompressed size is over the bound.
	ReasonBodyTooLarge Reason = "body_too_large"
	// ReasonBodyUnparseable: a body a rule decides on is not the JSON it
	// declares (malformed, too deep, a duplicate key, an unknown encoding).
	ReasonBodyUnparseable Reason = "body_unparseable"
	// ReasonMCPToolDenied: an MCP tools/call names a tool the rule does
	// not list.
	ReasonMCPToolDenied Reason = "mcp_tool_denied"
	// ReasonMCPMethodDenied: an MCP JSON-RPC method the rule does not pass
	// (initialize, ping, notifications/*, tools/list and tools/call pass).
	ReasonMCPMethodDenied Reason = "mcp_method_denied"
	// ReasonModelDenied: a model API request names a model the rule does
	// not list, or none.
	ReasonModelDenied Reason = "model_denied"
	// ReasonMaxTokensExceeded: a model API request asks for more output
	// tokens than the rule allows, or sets no maximum where one is needed.
	ReasonMaxTokensExceeded Reason = "max_tokens_exceeded"
	// ReasonTokenBudgetExceeded: the identity's token budget of the
	// window cannot pay for the request's reservation.
	ReasonTokenBudgetExceeded Reason = "token_budget_exceeded"
	// ReasonByteBudgetExceeded: the identity has sent or received its
	// byte budget of the window.
	ReasonByteBudgetExceeded Reason = "byte_budget_exceeded"
	// ReasonSecretInRequest: the request carries the value of a loaded
	// secret (in its URL, a header or its body) where no credential action
	// put it, or a secret pattern a rule or identity refuses.
	ReasonSecretInRequest Reason = "secret_in_request"

	// Reasons of every entry point's audit log.
	ReasonAuditUnavailable Reason = "audit_unavailable"
	// ReasonAuditBudgetExceeded refuses an allow the identity's audit budget
	// (audit.identity_rate) cannot pay for.
	ReasonAuditBudgetExceeded Reason = "audit_budget_exceeded"

	// Reasons of the SQL pre-scan, parser and Postgres gate.
	ReasonSQLTooComplex        Reason = "sql_too_complex"
	ReasonSQLParseError        Reason = "sql_parse_error"
	ReasonSQLInvalidUTF8       Reason = "sql_invalid_utf8"
	ReasonSQLTooManyStatements Reason = "sql_too_many_statements"
	ReasonSessionLimit         Reason = "session_limit"
	ReasonFunctionCallDenied   Reason = "function_call_denied"
	ReasonStatementNotVetted   Reason = "statement_not_vetted"
	// ReasonOtherStatementDenied: an allowed statement not run because another
	// statement of its query was denied.
	ReasonOtherStatementDenied   Reason = "other_statement_denied"
	ReasonStartupInvalid         Reason = "startup_invalid"
	ReasonStartupParameterDenied Reason = "startup_parameter_denied"
	ReasonUnknownIdentity        Reason = "unknown_identity"
	ReasonAuthenticationFailed   Reason = "authentication_failed"
	ReasonUpstreamUnavailable    Reason = "upstream_unavailable"
	ReasonCatalogUnavailable     Reason = "catalog_unavailable"
)

// reasonEntry is a reason's class and the codes in which it differs from
// its class.
type reasonEntry struct {
	class Class
	// refuses are the entry points whose decisions can be denied with
	// the reason; none for a reason that never refuses a decision.
	refuses Kinds
	// ends are the entry points whose allowed requests can end denied
	// with the reason (an http_done or connect_done record).
	ends Kinds
	// liftable: a rule decision, which an observe mode may let through
	// (recording it as would_deny) and a grant may lift. Never set for the
	// refusals that protect the box itself: the address floor, malformed
	// requests, secrets leaving, audit and engine failures.
	liftable bool
	http     int
	rcode    *int
	sqlState string
}

func rcode(n int) *int { return &n }

// Sets of entry points for the table's refuses and ends columns.
const (
	inHTTP     = Kinds(1) << KindHTTP
	inConnect  = Kinds(1) << KindConnect
	inRedirect = Kinds(1) << KindRedirect
	inDNS      = Kinds(1) << KindDNS
	inSQL      = Kinds(1) << KindSQL
	// inEntries: every entry point asks the engine and appends to the
	// audit log, and has a destination the address floor checks.
	inEntries = inHTTP | inConnect | inRedirect | inDNS | inSQL
	// inTargets: the parsers of a requested host and port.
	inTargets = inHTTP | inConnect | inRedirect
	// inURLs: the parser of a request URL.
	inURLs = inHTTP | inRedirect
	// inDials: the dial of an allowed request; the Postgres gate dials
	// before its login is allowed, so it refuses instead.
	inDials = inHTTP | inConnect
)

// reasonTable is the one table of declared reasons.
var reasonTable = map[Reason]reasonEntry{
	ReasonNoFacts:           {class: ClassPolicy, refuses: inEntries},
	ReasonNoDecision:        {class: ClassPolicy, refuses: inEntries},
	ReasonMalformedDecision: {class: ClassPolicy, refuses: inEntries},
	ReasonPolicyError:       {class: ClassPolicy, refuses: inEntries},
	ReasonPolicyTimeout:     {class: ClassPolicy, refuses: inEntries},
	ReasonNoMatchingRule:    {class: ClassPolicy, refuses: inEntries, liftable: true},
	ReasonRuleDeny:          {class: ClassPolicy, refuses: inTargets, liftable: true},
	ReasonGrantExpired:      {class: ClassPolicy, refuses: inTargets, liftable: true},

	ReasonMalformedURL:      {class: ClassMalformed, refuses: inTargets},
	ReasonMalformedHost:     {class: ClassMalformed, refuses: inTargets},
	ReasonMalformedPort:     {class: ClassMalformed, refuses: inTargets},
	ReasonMalformedMethod:   {class: ClassMalformed, refuses: inURLs},
	ReasonUnsupportedScheme: {class: ClassMalformed, refuses: inURLs},
	ReasonTargetTooLong:     {class: ClassMalformed, refuses: inURLs},
	ReasonHostTooLong:       {class: ClassMalformed, refuses: inTargets},
	ReasonPathTooLong:       {class: ClassMalformed, refuses: inURLs},

	ReasonLoopbackAddress:        {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonPrivateAddress:         {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonLinkLocalAddress:       {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonCGNATAddress:           {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonULAAddress:             {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonMulticastAddress:       {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonUnspecifiedAddress:     {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonBroadcastAddress:       {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonDocumentationAddress:   {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonBenchmarkingAddress:    {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonReservedAddress:        {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonThisNetworkAddress:     {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonMetadataAddress:        {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonUnknownAddress:         {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonZonedAddress:           {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonInternalDenied:         {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonInternalPortNotAllowed: {class: ClassPolicy, refuses: inEntries, ends: inDials},
	ReasonMalformedAddress:       {class: ClassMalformed, refuses: inSQL, ends: inDials},
	ReasonInvalidPort:            {class: ClassMalformed, refuses: inSQL, ends: inDials},
	ReasonAddressDenied:          {class: ClassPolicy, refuses: inSQL},

	ReasonMetadataName:      {class: ClassPolicy, refuses: inDNS | inSQL, ends: inDials},
	ReasonIPLiteralName:     {class: ClassPolicy, refuses: inDNS},
	ReasonMalformedName:     {class: ClassMalformed, refuses: inDNS},
	ReasonNameTooLong:       {class: ClassMalformed, refuses: inDNS},
	ReasonLabelTooLong:      {class: ClassMalformed, refuses: inDNS},
	ReasonPolicyDenied:      {class: ClassPolicy, refuses: inDNS, liftable: true},
	ReasonQTypeNotAllowed:   {class: ClassPolicy, refuses: inDNS, liftable: true},
	ReasonQClassNotAllowed:  {class: ClassPolicy, refuses: inDNS},
	ReasonUnknownClient:     {class: ClassIdentity, refuses: inDNS},
	ReasonCNAMEChainTooLong: {class: ClassPolicy, refuses: inDNS | inSQL, ends: inDials},
	ReasonDNSFailure:        {class: ClassUpstream, refuses: inDNS | inSQL, ends: inDials},
	ReasonDNSNXDomain:       {class: ClassUpstream, refuses: inDNS | inSQL, ends: inDials, rcode: rcode(dns.RcodeNameError)},
	// An allowed name without addresses is an empty answer, not an error.
	ReasonDNSNoAddress: {class: ClassUpstream, refuses: inSQL, ends: inDials, rcode: rcode(dns.RcodeSuccess)},

	ReasonProxyAuthRequired: {class: ClassIdentity, refuses: inHTTP | inConnect},
	ReasonProxyAuthInvalid:  {class: ClassIdentity, refuses: inHTTP | inConnect},
	// A revoked identity authenticated: 407 would ask it for credentials
	// it already sent. A session of it ends 28000.
	ReasonIdentityRevoked:      {class: ClassIdentity, refuses: inHTTP | inConnect | inSQL, ends: inConnect, http: http.StatusForbidden, sqlState: sqlInvalidAuthorization},
	ReasonHTTPSRequiresConnect: {class: ClassMalformed, refuses: inHTTP},
	ReasonNotProxyRequest:      {class: ClassMalformed, refuses: inHTTP},
	ReasonMalformedRequest:     {class: ClassMalformed, refuses: inTargets},
	// net/http answers these itself, with its own statuses.
	ReasonHeadersTooLarge:             {class: ClassMalformed, refuses: inHTTP, http: http.StatusRequestHeaderFieldsTooLarge},
	ReasonUnsupportedHTTPVersion:      {class: ClassMalformed, refuses: inHTTP, http: http.StatusHTTPVersionNotSupported},
	ReasonUnsupportedTransferEncoding: {class: ClassMalformed, refuses: inHTTP, http: http.StatusNotImplemented},
	ReasonExpectationFailed:           {class: ClassMalformed, refuses: inHTTP, http: http.StatusExpectationFailed},
	ReasonIncompleteRequest:           {class: ClassMalformed, refuses: inHTTP},
	ReasonRequestBodyNotAllowed:       {class: ClassMalformed, refuses: inHTTP},
	ReasonRedirectDenied:              {class: ClassPolicy, refuses: inRedirect, liftable: true},
	ReasonSNIMismatch:                 {class: ClassPolicy, refuses: inConnect, ends: inConnect},
	ReasonTLSRequired:                 {class: ClassPolicy, refuses: inConnect, ends: inConnect},
	ReasonMalformedClientHello:        {class: ClassMalformed, refuses: inConnect, ends: inConnect},
	ReasonTunnelHostMismatch:          {class: ClassPolicy, refuses: inConnect, ends: inConnect},
	ReasonUnsupportedCommand:          {class: ClassMalformed, refuses: inConnect},
	ReasonSNIRequired:                 {class: ClassPolicy, refuses: inConnect},
	ReasonDestinationMismatch:         {class: ClassPolicy, refuses: inConnect},
	ReasonEncryptedClientHello:        {class: ClassPolicy, refuses: inConnect, ends: inConnect},
	ReasonHostMismatch:                {class: ClassPolicy, refuses: inHTTP},
	ReasonInspectionRequired:          {class: ClassPolicy, ends: inConnect},
	ReasonUpstreamTLS:                 {class: ClassUpstream, ends: inHTTP},
	ReasonInspectUnavailable:          {class: ClassUnavailable, refuses: inConnect},
	ReasonRateLimited:                 {class: ClassLimit, refuses: inHTTP | inConnect | inDNS},
	ReasonIdentityConnLimit:           {class: ClassLimit, refuses: inHTTP | inConnect},
	ReasonSourceRateLimited:           {class: ClassLimit, refuses: inHTTP | inConnect},
	ReasonFDExhausted:                 {class: ClassLimit},
	ReasonUpstreamTimeout:             {class: ClassUpstream, ends: inDials, http: http.StatusGatewayTimeout},
	ReasonUpstreamUnreachable:         {class: ClassUpstream, ends: inDials},
	// PostgreSQL's own code for a session ended by a shutdown
	// (admin_shutdown), which poolers and drivers retry on.
	ReasonShuttingDown: {class: ClassUnavailable, refuses: inHTTP | inConnect | inSQL, ends: inDials, sqlState: "57P01"},
	ReasonClientClosed: {class: ClassClient},

	ReasonCredentialUnresolved:       {class: ClassPolicy, refuses: inHTTP},
	ReasonCredentialWrongDestination: {class: ClassPolicy, refuses: inHTTP},
	ReasonCredentialLiteral:          {class: ClassPolicy, refuses: inHTTP},
	ReasonCredentialCleartext:        {class: ClassPolicy, refuses: inHTTP, ends: inHTTP},
	ReasonCredentialUnsafeRequest:    {class: ClassPolicy, refuses: inHTTP},
	ReasonCredentialUnscrubbable:     {class: ClassUpstream, ends: inHTTP},
	ReasonBodyTooLarge:               {class: ClassLimit, refuses: inHTTP, ends: inHTTP, http: http.StatusRequestEntityTooLarge},
	ReasonBodyUnparseable:            {class: ClassMalformed, refuses: inHTTP, http: http.StatusBadRequest},
	ReasonMCPToolDenied:              {class: ClassPolicy, refuses: inHTTP, liftable: true},
	ReasonMCPMethodDenied:            {class: ClassPolicy, refuses: inHTTP, liftable: true},
	ReasonModelDenied:                {class: ClassPolicy, refuses: inHTTP, liftable: true},
	ReasonMaxTokensExceeded:          {class: ClassPolicy, refuses: inHTTP, liftable: true},
	ReasonTokenBudgetExceeded:        {class: ClassLimit, refuses: inHTTP},
	ReasonByteBudgetExceeded:         {class: ClassLimit, refuses: inHTTP | inConnect, ends: inHTTP | inConnect},
	ReasonSecretInRequest:            {class: ClassPolicy, refuses: inHTTP, ends: inHTTP},

	ReasonAuditUnavailable:    {class: ClassUnavailable, refuses: inEntries},
	ReasonAuditBudgetExceeded: {class: ClassLimit, refuses: inEntries},

	ReasonSQLTooComplex:          {class: ClassLimit, refuses: inSQL},
	ReasonSQLParseError:          {class: ClassMalformed, refuses: inSQL},
	ReasonSQLInvalidUTF8:         {class: ClassMalformed, refuses: inSQL},
	ReasonSQLTooManyStatements:   {class: ClassLimit, refuses: inSQL},
	ReasonSessionLimit:           {class: ClassLimit, refuses: inSQL},
	ReasonFunctionCallDenied:     {class: ClassPolicy, refuses: inSQL},
	ReasonStatementNotVetted:     {class: ClassPolicy, refuses: inSQL},
	ReasonOtherStatementDenied:   {class: ClassPolicy, refuses: inSQL},
	ReasonStartupInvalid:         {class: ClassMalformed, refuses: inSQL},
	ReasonStartupParameterDenied: {class: ClassPolicy, refuses: inSQL},
	ReasonUnknownIdentity:        {class: ClassIdentity, refuses: inSQL},
	ReasonAuthenticationFailed:   {class: ClassIdentity, refuses: inSQL},
	ReasonUpstreamUnavailable:    {class: ClassUpstream, refuses: inSQL},
	ReasonCatalogUnavailable:     {class: ClassUpstream, refuses: inSQL},
}
