package policy

import (
	"encoding/json"
	"strconv"
)

// Action is what an agent refused with a reason can do about it. It is
// part of the JSON refusal an agent reads, so the values are stable.
type Action string

// The actions.
const (
	// ActionRequestGrant: a rule refused it; an operator may grant the
	// request for a while (egressd grant --from-request ID).
	ActionRequestGrant Action = "request_grant"
	// ActionRetryLater: a limit or egressd itself refused it for now.
	ActionRetryLater Action = "retry_later"
	// ActionAuthenticate: the sandbox did not prove who it is.
	ActionAuthenticate Action = "authenticate"
	// ActionFixRequest: the request could not be read exactly as sent.
	ActionFixRequest Action = "fix_request"
	// ActionNone: nothing the agent or a grant can do lifts it.
	ActionNone Action = "none"
)

// Action is what an agent refused with r can do.
func (r Reason) Action() Action {
	if r.Liftable() {
		return ActionRequestGrant
	}
	switch r.Class() {
	case ClassLimit, ClassUnavailable:
		return ActionRetryLater
	case ClassIdentity:
		if r == ReasonIdentityRevoked {
			// It did authenticate; its identity may no longer send.
			return ActionNone
		}
		return ActionAuthenticate
	case ClassMalformed:
		return ActionFixRequest
	}
	return ActionNone
}

// actionMessages is the sentence an agent reads for each action. None
// names a rule, a host or an address the agent did not send: an agent may
// be acting on a prompt injection, and the refusal must not map the
// policy for it.
var actionMessages = map[Action]string{
	ActionRequestGrant: "egressd's policy does not allow this request; an operator may grant it for a while from its request id (egressd grant --from-request ID)",
	ActionRetryLater:   "a limit was reached or egressd cannot decide right now; retry later",
	ActionAuthenticate: "the sandbox's proxy credentials are missing or not accepted",
	ActionFixRequest:   "the request could not be read exactly as sent; send it well-formed",
	ActionNone:         "this refusal protects the sandbox's boundary; no grant lifts it",
}

// Denial is the JSON refusal an agent reads (an HTTP body for a client
// that accepts application/json, and error.data of an MCP refusal).
type Denial struct {
	Denied  bool   `json:"denied"`
	Reason  Reason `json:"reason"`
	Class   string `json:"class"`
	Rule    string `json:"rule,omitempty"`
	Request string `json:"request"`
	Action  Action `json:"action"`
	Message string `json:"message"`
	// RetryAfter is in seconds, when the refusal says when to retry.
	RetryAfter int `json:"retry_after,omitempty"`
}

// DenialOf builds the denial of reason by rule for request id requestID;
// retryAfter is in seconds, 0 when unknown.
func DenialOf(reason Reason, rule, requestID string, retryAfter int) Denial {
	a := reason.Action()
	msg := "egressd denied this request (" + string(reason) + "): " + actionMessages[a]
	if retryAfter > 0 {
		msg += " (after " + strconv.Itoa(retryAfter) + "s)"
	}
	return Denial{Denied: true, Reason: reason, Class: reason.Class().String(), Rule: rule,
		Request: requestID, Action: a, Message: msg, RetryAfter: retryAfter}
}

// DenialJSON is DenialOf as one JSON object.
func DenialJSON(reason Reason, rule, requestID string, retryAfter int) []byte {
	b, err := json.Marshal(DenialOf(reason, rule, requestID, retryAfter))
	if err != nil {
		panic("policy: marshal denial: " + err.Error()) // strings and ints only
	}
	return b
}
