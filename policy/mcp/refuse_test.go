package mcp

import (
	"encoding/json"
	"net/http"
	"testing"
)

// wireResponse is a JSON-RPC response as an independent decoder reads it.
type wireResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *wireError      `json:"error"`
}

type wireError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Reason string `json:"reason"`
		Tool   string `json:"tool"`
		Batch  bool   `json:"batch"`
	} `json:"data"`
}

func TestErrorBody(t *testing.T) {
	denied := Refusal{Reason: "mcp_tool_denied"}
	tests := []struct {
		name    string
		body    string
		refused map[int]Refusal
		status  int
		want    []wireResponse // only ID, code, reason, tool are compared
	}{
		{name: "tools/call", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_repo"}}`,
			refused: map[int]Refusal{0: denied}, status: http.StatusOK,
			want: []wireResponse{resp(`7`, "mcp_tool_denied", "delete_repo")}},
		{name: "string id kept", body: `{"jsonrpc":"2.0","id":"r\"1","method":"resources/list"}`,
			refused: map[int]Refusal{0: {Reason: "mcp_method_denied", Message: "no resources"}}, status: http.StatusOK,
			want: []wireResponse{resp(`"r\"1"`, "mcp_method_denied", "")}},
		{name: "batch", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_repo"}},{"jsonrpc":"2.0","id":9,"result":{}}]`,
			refused: map[int]Refusal{2: denied}, status: http.StatusOK,
			want: []wireResponse{batchResp(`1`, "mcp_tool_denied"), resp(`2`, "mcp_tool_denied", "delete_repo")}},
		{name: "notification only", body: `{"jsonrpc":"2.0","method":"notifications/x"}`,
			refused: map[int]Refusal{0: {Reason: "rego_said_no"}}, status: http.StatusForbidden,
			want: []wireResponse{resp(`null`, "rego_said_no", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(value(t, tt.body))
			if err != nil {
				t.Fatal(err)
			}
			body, status := ErrorBody(r, tt.refused)
			if status != tt.status {
				t.Errorf("status = %d; want %d", status, tt.status)
			}
			var got []wireResponse
			if r.Batch {
				err = json.Unmarshal(body, &got)
			} else {
				got = make([]wireResponse, 1)
				err = json.Unmarshal(body, &got[0])
			}
			if err != nil {
				t.Fatalf("ErrorBody = %s: %v", body, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ErrorBody = %s; want %d responses", body, len(tt.want))
			}
			for i, g := range got {
				w := tt.want[i]
				if g.JSONRPC != "2.0" || string(g.ID) != string(w.ID) || g.Error == nil || g.Error.Code != CodeRefused ||
					g.Error.Data.Reason != w.Error.Data.Reason || g.Error.Data.Tool != w.Error.Data.Tool || g.Error.Data.Batch != w.Error.Data.Batch || g.Error.Message == "" {
					t.Errorf("response %d = %s; want id %s, data %+v", i, body, w.ID, w.Error.Data)
				}
			}
		})
	}
}

func resp(id, reason, tool string) wireResponse {
	w := wireResponse{ID: json.RawMessage(id), Error: &wireError{}}
	w.Error.Data.Reason, w.Error.Data.Tool = reason, tool
	return w
}

func batchResp(id, reason string) wireResponse {
	w := resp(id, reason, "")
	w.Error.Data.Batch = true
	return w
}
