package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"go.uber.org/zap"

	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/policy"
)

// maxBody bounds a POST /v1/grants body.
const maxBody = 64 << 10

// List is the body of GET /v1/grants.
type List struct {
	Grants []policy.Grant `json:"grants"`
}

// Routes are the authenticated admin routes of grants, each needing scope
// grant; the authenticated client is the grant's granted_by or the
// revoker.
func (m *Manager) Routes() []admin.Route {
	return []admin.Route{
		{Pattern: "POST /v1/grants", Scope: admin.ScopeGrant, Handler: m.serveCreate},
		{Pattern: "GET /v1/grants", Scope: admin.ScopeGrant, Handler: func(w http.ResponseWriter, _ *http.Request, _ string) {
			gs := m.List()
			if gs == nil {
				gs = []policy.Grant{}
			}
			writeJSON(w, http.StatusOK, List{Grants: gs})
		}},
		{Pattern: "DELETE /v1/grants/{id}", Scope: admin.ScopeGrant, Handler: func(w http.ResponseWriter, r *http.Request, principal string) {
			g, err := m.Revoke(r.Context(), r.PathValue("id"), principal)
			if err != nil {
				m.writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, g)
		}},
	}
}

func (m *Manager) serveCreate(w http.ResponseWriter, r *http.Request, principal string) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		m.writeError(w, refuse(http.StatusBadRequest, "read body: %v", err))
		return
	}
	if len(b) > maxBody {
		m.writeError(w, refuse(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxBody))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var req CreateRequest
	if err := dec.Decode(&req); err != nil {
		m.writeError(w, refuse(http.StatusBadRequest, "body: %v: send {\"from_request\": ID, \"ttl\": \"1h\"} or {\"identity\", \"method\", \"url\", \"ttl\"}", err))
		return
	}
	g, err := m.Create(r.Context(), req, principal)
	if err != nil {
		m.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, g)
}

// writeError answers a refusal with its status, anything else with 500.
func (m *Manager) writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var r *refusal
	if errors.As(err, &r) {
		status = r.status
	} else {
		m.o.Log.Error("grant request failed", zap.Error(err))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, err.Error()+"\n") // a client gone mid-answer has nothing to be told
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // a client gone mid-answer has nothing to be told
}
