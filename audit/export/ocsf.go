package export

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/version"
)

// OCSFVersion is the OCSF schema version the events follow.
const OCSFVersion = "1.3.0"

// OCSF classes the records map to (category_uid is class_uid / 1000).
// SQL goes to Datastore Activity (6005): its events are operations on a
// datastore (activity Query) with the database object and the query text,
// which is what a gated statement is; Network Activity would lose the
// database and the statement, and there is no SQL class of its own.
// Records the writer adds (segment, checkpoint, started, resumed,
// accepted_break) and grants are Base Events (0): they are not network
// activity, and the chain needs them in the stream.
const (
	ClassBase      = 0
	ClassNetwork   = 4001
	ClassHTTP      = 4002
	ClassDNS       = 4003
	ClassDatastore = 6005
)

// OCSFEvent is one exported OCSF event. Only the fields egressd fills are
// declared; the record line in RawData is the authority for the rest.
type OCSFEvent struct {
	ClassUID    int    `json:"class_uid"`
	CategoryUID int    `json:"category_uid"`
	ActivityID  int    `json:"activity_id"`
	TypeUID     int    `json:"type_uid"`
	SeverityID  int    `json:"severity_id"`
	Time        int64  `json:"time"`
	Message     string `json:"message,omitempty"`
	// ActionID is 1 Allowed or 2 Denied; DispositionID 1 Allowed or 2
	// Blocked; StatusID 1 Success or 2 Failure. Zero on records that
	// decide nothing.
	ActionID      int    `json:"action_id,omitempty"`
	Action        string `json:"action,omitempty"`
	DispositionID int    `json:"disposition_id,omitempty"`
	Disposition   string `json:"disposition,omitempty"`
	StatusID      int    `json:"status_id,omitempty"`
	StatusDetail  string `json:"status_detail,omitempty"`

	Metadata     OCSFMetadata  `json:"metadata"`
	Actor        *OCSFActor    `json:"actor,omitempty"`
	SrcEndpoint  *OCSFEndpoint `json:"src_endpoint,omitempty"`
	DstEndpoint  *OCSFEndpoint `json:"dst_endpoint,omitempty"`
	HTTPRequest  *OCSFHTTP     `json:"http_request,omitempty"`
	Query        *OCSFDNSQuery `json:"query,omitempty"`
	Database     *OCSFDatabase `json:"database,omitempty"`
	QueryInfo    *OCSFQuery    `json:"query_info,omitempty"`
	FirewallRule *OCSFRule     `json:"firewall_rule,omitempty"`
	// RawData is the audit record line verbatim: its hash covers these
	// bytes, which the mapping above cannot reproduce.
	RawData  string       `json:"raw_data"`
	Unmapped OCSFUnmapped `json:"unmapped"`
}

// OCSFMetadata is the event's metadata object.
type OCSFMetadata struct {
	Version  string      `json:"version"`
	Product  OCSFProduct `json:"product"`
	LogName  string      `json:"log_name"`
	Sequence uint64      `json:"sequence"`
	// UID is "replica/seq": unique across a fleet's streams.
	UID string `json:"uid"`
	// CorrelationUID is the request's W3C trace id, when it sent one.
	CorrelationUID string `json:"correlation_uid,omitempty"`
}

// OCSFProduct names egressd.
type OCSFProduct struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version,omitempty"`
}

// OCSFActor is who acted: the sandbox identity.
type OCSFActor struct {
	User OCSFUser `json:"user"`
}

// OCSFUser is the identity's name.
type OCSFUser struct {
	Name string `json:"name"`
}

// OCSFEndpoint is a network endpoint.
type OCSFEndpoint struct {
	Hostname string `json:"hostname,omitempty"`
	IP       string `json:"ip,omitempty"`
	Port     int    `json:"port,omitempty"`
}

// OCSFHTTP is the HTTP request.
type OCSFHTTP struct {
	HTTPMethod  string  `json:"http_method,omitempty"`
	URL         OCSFURL `json:"url"`
	Traceparent string  `json:"x_traceparent,omitempty"`
}

// OCSFURL is the request URL, split.
type OCSFURL struct {
	Scheme      string `json:"scheme,omitempty"`
	Hostname    string `json:"hostname,omitempty"`
	Port        int    `json:"port,omitempty"`
	Path        string `json:"path,omitempty"`
	QueryString string `json:"query_string,omitempty"`
}

// OCSFDNSQuery is the DNS question.
type OCSFDNSQuery struct {
	Hostname string `json:"hostname"`
	Type     string `json:"type,omitempty"`
}

// OCSFDatabase is the database a statement ran against.
type OCSFDatabase struct {
	Name   string `json:"name,omitempty"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type"`
}

// OCSFQuery is the (normalized) statement.
type OCSFQuery struct {
	QueryString string `json:"query_string"`
}

// OCSFRule is the policy rule that decided.
type OCSFRule struct {
	UID  string `json:"uid"`
	Name string `json:"name"`
}

// OCSFUnmapped carries the chain position and what OCSF has no field for.
type OCSFUnmapped struct {
	Seq     uint64 `json:"egressd_seq"`
	Prev    string `json:"egressd_prev"`
	Hash    string `json:"egressd_hash"`
	Replica string `json:"egressd_replica"`
	Chain   string `json:"egressd_chain"`
	Kind    string `json:"egressd_kind"`
	Reason  string `json:"egressd_reason,omitempty"`
	Policy  string `json:"egressd_policy,omitempty"`
}

// ClassOf is the OCSF class a record kind maps to.
func ClassOf(k audit.Kind) int {
	switch k {
	case audit.KindHTTP, audit.KindHTTPDone, audit.KindRedirect:
		return ClassHTTP
	case audit.KindConnect, audit.KindConnectDone, audit.KindAccept:
		return ClassNetwork
	case audit.KindDNS:
		return ClassDNS
	case audit.KindSQL:
		return ClassDatastore
	}
	return ClassBase
}

// httpActivity is OCSF HTTP Activity's activity_id by method; any other
// method is 99 Other.
var httpActivity = map[string]int{
	"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8,
}

// activity is the activity_id within the record's class.
func activity(class int, r *audit.Record) int {
	switch class {
	case ClassHTTP:
		if a, ok := httpActivity[r.Method]; ok {
			return a
		}
		return 99
	case ClassNetwork:
		switch {
		case r.Kind.IsCompletion():
			return 2 // Close
		case r.Decision == audit.DecisionDeny:
			return 5 // Refuse
		}
		return 1 // Open
	case ClassDNS:
		return 1 // Query
	case ClassDatastore:
		return 4 // Query
	}
	return 99 // Other
}

// MapOCSF maps one event to OCSF.
func MapOCSF(ev *Event) OCSFEvent {
	r := &ev.Rec
	class := ClassOf(r.Kind)
	act := activity(class, r)
	o := OCSFEvent{
		ClassUID: class, CategoryUID: class / 1000, ActivityID: act, TypeUID: class*100 + act,
		SeverityID: 1, Time: r.TS.UnixMilli(), Message: string(r.Kind),
		Metadata: OCSFMetadata{
			Version: OCSFVersion,
			Product: OCSFProduct{Name: "egressd", VendorName: "egressd", Version: version.Get().Version},
			LogName: "egressd audit", Sequence: r.Seq, UID: ev.Replica + "/" + strconv.FormatUint(r.Seq, 10),
			CorrelationUID: traceID(r.Traceparent),
		},
		RawData:  string(ev.Line),
		Unmapped: OCSFUnmapped{Seq: r.Seq, Prev: r.Prev, Hash: r.Hash, Replica: ev.Replica, Chain: ev.Chain, Kind: string(r.Kind), Reason: r.Reason, Policy: r.Policy},
	}
	switch r.Decision {
	case audit.DecisionAllow:
		o.ActionID, o.Action, o.DispositionID, o.Disposition, o.StatusID = 1, "Allowed", 1, "Allowed", 1
	case audit.DecisionDeny:
		o.ActionID, o.Action, o.DispositionID, o.Disposition, o.StatusID = 2, "Denied", 2, "Blocked", 2
		o.SeverityID = 3
	}
	o.StatusDetail = r.Reason
	if r.Identity != "" {
		o.Actor = &OCSFActor{User: OCSFUser{Name: r.Identity}}
	}
	if r.Client != "" {
		o.SrcEndpoint = clientEndpoint(r.Client)
	}
	if r.Host != "" || r.IP != "" || r.Port != 0 {
		o.DstEndpoint = &OCSFEndpoint{Hostname: r.Host, IP: r.IP, Port: int(r.Port)}
	}
	if r.Rule != "" {
		o.FirewallRule = &OCSFRule{UID: r.Rule, Name: r.Rule}
	}
	switch class {
	case ClassHTTP:
		o.HTTPRequest = &OCSFHTTP{HTTPMethod: r.Method, Traceparent: r.Traceparent, URL: OCSFURL{
			Scheme: r.Scheme, Hostname: r.Host, Port: int(r.Port), Path: r.Path, QueryString: r.Query}}
	case ClassDNS:
		o.Query = &OCSFDNSQuery{Hostname: r.Name, Type: r.QType}
	case ClassDatastore:
		o.Database = &OCSFDatabase{Name: r.Database, TypeID: 99, Type: "PostgreSQL"}
		o.QueryInfo = &OCSFQuery{QueryString: r.SQL}
	}
	return o
}

// clientEndpoint splits a client address ("ip:port") into an endpoint;
// anything else is kept whole as the hostname.
func clientEndpoint(client string) *OCSFEndpoint {
	if ap, err := netip.ParseAddrPort(client); err == nil {
		return &OCSFEndpoint{IP: ap.Addr().Unmap().String(), Port: int(ap.Port())}
	}
	if a, err := netip.ParseAddr(client); err == nil {
		return &OCSFEndpoint{IP: a.String()}
	}
	return &OCSFEndpoint{Hostname: client}
}

// traceID is the trace id of a traceparent ("00-<trace>-<span>-<flags>").
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) < 4 {
		return ""
	}
	return parts[1]
}
