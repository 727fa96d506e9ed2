package replay

import (
	"github.com/egressd/egressd/policy"
)

// stage is where on its listener's path a recorded verdict was reached,
// relative to the part a replay re-runs (parse, the address floor for an
// IP literal, the policy).
type stage uint8

const (
	// stageDecided: the verdict of the re-run part itself.
	stageDecided stage = iota
	// stageBefore: refused before the policy was asked (authentication,
	// limits, shutdown, the audit log): not a decision of any bundle.
	stageBefore
	// stageAfter: the policy allowed; a later check on what the record
	// does not hold refused.
	stageAfter
	// stageParse: refused while the target was parsed; the record holds
	// what was read of it.
	stageParse
)

// before are the refusals made before the policy is asked, at every entry
// point.
var before = reasonSet(
	policy.ReasonProxyAuthRequired, policy.ReasonProxyAuthInvalid, policy.ReasonIdentityRevoked,
	policy.ReasonRateLimited, policy.ReasonIdentityConnLimit, policy.ReasonSourceRateLimited,
	policy.ReasonByteBudgetExceeded, policy.ReasonShuttingDown, policy.ReasonFDExhausted,
	policy.ReasonUnknownClient, policy.ReasonQClassNotAllowed,
	policy.ReasonSessionLimit, policy.ReasonStartupInvalid, policy.ReasonStartupParameterDenied,
	policy.ReasonUnknownIdentity, policy.ReasonAuthenticationFailed, policy.ReasonUpstreamUnavailable,
	policy.ReasonCatalogUnavailable, policy.ReasonFunctionCallDenied, policy.ReasonStatementNotVetted,
	policy.ReasonAuditUnavailable, policy.ReasonAuditBudgetExceeded,
	policy.ReasonNotProxyRequest, policy.ReasonHeadersTooLarge, policy.ReasonUnsupportedHTTPVersion,
	policy.ReasonUnsupportedTransferEncoding, policy.ReasonExpectationFailed, policy.ReasonIncompleteRequest,
)

// parsing are the refusals of a target's parser.
var parsing = reasonSet(
	policy.ReasonMalformedURL, policy.ReasonMalformedHost, policy.ReasonMalformedPort,
	policy.ReasonMalformedMethod, policy.ReasonUnsupportedScheme, policy.ReasonTargetTooLong,
	policy.ReasonHostTooLong, policy.ReasonPathTooLong, policy.ReasonMalformedRequest,
	policy.ReasonMalformedName, policy.ReasonNameTooLong, policy.ReasonLabelTooLong,
	policy.ReasonSQLTooComplex, policy.ReasonSQLParseError, policy.ReasonSQLInvalidUTF8,
	policy.ReasonSQLTooManyStatements,
)

// after are, by entry point, the refusals made once the policy allowed.
var after = map[policy.Kind]map[policy.Reason]bool{
	policy.KindHTTP: reasonSet(
		policy.ReasonRequestBodyNotAllowed, policy.ReasonBodyTooLarge, policy.ReasonTokenBudgetExceeded,
		policy.ReasonCredentialUnresolved, policy.ReasonCredentialWrongDestination, policy.ReasonCredentialLiteral,
		policy.ReasonCredentialCleartext, policy.ReasonCredentialUnsafeRequest, policy.ReasonSecretInRequest,
	),
	policy.KindConnect: reasonSet(
		policy.ReasonInspectUnavailable, policy.ReasonSNIMismatch, policy.ReasonTLSRequired,
		policy.ReasonMalformedClientHello, policy.ReasonTunnelHostMismatch, policy.ReasonEncryptedClientHello,
		policy.ReasonInspectionRequired,
	),
	// The lookup, and the floor on the answer's addresses.
	policy.KindDNS: reasonSet(append([]policy.Reason{
		policy.ReasonDNSFailure, policy.ReasonDNSNXDomain, policy.ReasonDNSNoAddress, policy.ReasonCNAMEChainTooLong,
	}, floorReasons...)...),
}

// floorReasons are the address floor's refusals.
var floorReasons = []policy.Reason{
	policy.ReasonLoopbackAddress, policy.ReasonPrivateAddress, policy.ReasonLinkLocalAddress,
	policy.ReasonCGNATAddress, policy.ReasonULAAddress, policy.ReasonMulticastAddress,
	policy.ReasonUnspecifiedAddress, policy.ReasonBroadcastAddress, policy.ReasonDocumentationAddress,
	policy.ReasonBenchmarkingAddress, policy.ReasonReservedAddress, policy.ReasonThisNetworkAddress,
	policy.ReasonMetadataAddress, policy.ReasonUnknownAddress, policy.ReasonZonedAddress,
	policy.ReasonInternalDenied, policy.ReasonInternalPortNotAllowed,
}

// sqlUpstream are the Postgres gate's refusals of a session for its
// upstream's address or name, found when it dials, before the login is
// decided.
var sqlUpstream = reasonSet(append([]policy.Reason{
	policy.ReasonAddressDenied, policy.ReasonMalformedAddress, policy.ReasonInvalidPort,
	policy.ReasonMetadataName, policy.ReasonCNAMEChainTooLong, policy.ReasonDNSFailure,
	policy.ReasonDNSNXDomain, policy.ReasonDNSNoAddress,
}, floorReasons...)...)

// bodyReasons are the refusals of a body a rule decided on.
var bodyReasons = reasonSet(
	policy.ReasonBodyUnparseable, policy.ReasonMCPToolDenied, policy.ReasonMCPMethodDenied,
	policy.ReasonModelDenied, policy.ReasonMaxTokensExceeded,
)

func reasonSet(rs ...policy.Reason) map[policy.Reason]bool {
	m := make(map[policy.Reason]bool, len(rs))
	for _, r := range rs {
		m[r] = true
	}
	return m
}

// stageOf is where a record of kind k with reason r was decided.
func stageOf(k policy.Kind, r policy.Reason) stage {
	switch {
	case before[r], k == policy.KindSQL && sqlUpstream[r]:
		return stageBefore
	case parsing[r]:
		return stageParse
	case after[k][r], k == policy.KindRedirect && after[policy.KindHTTP][r]:
		return stageAfter
	}
	return stageDecided
}
