package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/internal/admin"
)

// The admin route `check --server` asks, and its bounds.
const (
	checkPath = "/v1/check"
	// maxCheckBody bounds one POST /v1/check body; the client sends at
	// most remoteChunkBytes (or one line, up to maxBatchLine) at a time.
	maxCheckBody = 4 * maxBatchLine
	// remoteChunkLines and remoteChunkBytes bound the lines one POST of
	// `check --server --batch` carries.
	remoteChunkLines = 4096
	remoteChunkBytes = maxBatchLine
	// remoteTimeout bounds one POST, catalog reads of sql checks included.
	remoteTimeout = 2 * time.Minute
)

// checkRoute is POST /v1/check on the admin listener, for clients holding
// scope check: the body is request lines as `check --batch` reads them,
// decided with the generation in force (current) and answered as --batch
// answers, one line each, in order. ?identity= is the identity of a line
// that names none.
func checkRoute(current func() *generation.Generation, log *zap.Logger) admin.Route {
	return admin.Route{
		Pattern: "POST " + checkPath,
		Scope:   admin.ScopeCheck,
		Handler: func(w http.ResponseWriter, r *http.Request, principal string) {
			// Read whole before answering: a net/http/1.1 handler cannot
			// read the body once it has written.
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCheckBody))
			if err != nil {
				status := http.StatusBadRequest
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					status = http.StatusRequestEntityTooLarge
				}
				http.Error(w, fmt.Sprintf("read request lines: %v", err), status)
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			st, err := decideLines(r.Context(), envOf(current()), r.URL.Query().Get("identity"), bytes.NewReader(body), w)
			log.Info("check", zap.String("principal", principal), zap.Int("decided", st.decided),
				zap.Int("denied", st.denied), zap.Int("malformed", st.malformed), zap.Error(err))
		},
	}
}

// remoteClient asks a running egressd's POST /v1/check.
type remoteClient struct {
	url   string
	token string
	hc    *http.Client
}

// remote is the client of --server: its URL, the token from --token-file
// or $EGRESSD_ADMIN_TOKEN, and --identity as the default identity.
func (f *checkFlags) remote() (*remoteClient, error) {
	if f.config != "" || f.policy != "" {
		return nil, usageErrorf("check --server decides with the running egressd's config and bundle: drop --config and --policy")
	}
	u, err := url.Parse(f.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("check --server %q: want the admin listener's URL, e.g. http://127.0.0.1:9090", f.server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + checkPath
	if f.identity != "" {
		u.RawQuery = url.Values{"identity": {f.identity}}.Encode()
	}
	token, err := adminToken(f.tokenFile, "check --server", admin.ScopeCheck)
	if err != nil {
		return nil, err
	}
	return &remoteClient{url: u.String(), token: token, hc: adminHTTPClient(remoteTimeout)}, nil
}

// checkRemote is a single check asked of --server: it prints the answer
// as a local check prints its own, with the same exit status.
func checkRemote(ctx context.Context, cf *checkFlags, req *checkRequest, stdout io.Writer) error {
	rc, err := cf.remote()
	if err != nil {
		return err
	}
	if req.Body != nil && *req.Body == "-" && req.stdin != nil {
		b, err := io.ReadAll(io.LimitReader(req.stdin, maxBatchLine+1))
		if err != nil {
			return fmt.Errorf("check --server: read the body from standard input: %w", err)
		}
		if len(b) > maxBatchLine {
			return usageErrorf("check --server: the body on standard input is larger than %d bytes", maxBatchLine)
		}
		body := string(b)
		req.Body = &body
	}
	req.Identity = "" // sent as ?identity=
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	var out bytes.Buffer
	st, err := rc.post(ctx, append(line, '\n'), &out)
	if err != nil {
		return err
	}
	if st.malformed > 0 {
		var le lineError
		json.Unmarshal(out.Bytes(), &le) //nolint:errcheck // tally found it to be one
		return usageErrorf("check --server: %s", le.Error)
	}
	if st.decided != 1 {
		return fmt.Errorf("check --server %s: answered %d decisions for one request", rc.url, st.decided)
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return fmt.Errorf("write decision: %w", err)
	}
	return st.err()
}

// batch sends r's lines to the server in chunks and copies the answers to
// w in order. A line past maxBatchLine is answered here, as the server
// would answer it, without sending it.
func (c *remoteClient) batch(ctx context.Context, r io.Reader, w io.Writer) (batchStats, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriterSize(w, 64<<10)
	var total batchStats
	var chunk []byte
	lines := 0
	flush := func() error {
		if lines == 0 {
			return nil
		}
		st, err := c.post(ctx, chunk, bw)
		total.decided += st.decided
		total.denied += st.denied
		total.malformed += st.malformed
		chunk, lines = chunk[:0], 0
		return err
	}
	for {
		start := len(chunk)
		var long bool
		var err error
		chunk, long, err = appendLine(br, chunk)
		if err != nil && !errors.Is(err, io.EOF) {
			return total, fmt.Errorf("read requests: %w", err)
		}
		switch {
		case long:
			if ferr := flush(); ferr != nil {
				return total, ferr
			}
			total.malformed++
			b, _ := json.Marshal(lineError{Error: fmt.Sprintf("line longer than %d bytes", maxBatchLine)})
			if _, werr := bw.Write(append(b, '\n')); werr != nil {
				return total, fmt.Errorf("write decisions: %w", werr)
			}
		case len(chunk) > start:
			chunk = append(chunk, '\n')
			lines++
		}
		if lines >= remoteChunkLines || len(chunk) >= remoteChunkBytes || (err != nil && lines > 0) {
			if ferr := flush(); ferr != nil {
				return total, ferr
			}
		}
		if err != nil {
			break
		}
	}
	if err := bw.Flush(); err != nil {
		return total, fmt.Errorf("write decisions: %w", err)
	}
	return total, nil
}

// post sends request lines and copies the answer lines to w, counting
// them. A refused token is an error naming admin.clients.
func (c *remoteClient) post(ctx context.Context, lines []byte, w io.Writer) (batchStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(lines))
	if err != nil {
		return batchStats{}, fmt.Errorf("check --server: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.hc.Do(req)
	if err != nil {
		return batchStats{}, &exitError{code: 2, err: fmt.Errorf("check --server: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		text := strings.TrimSpace(string(msg))
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			return batchStats{}, usageErrorf("check --server %s: the server refused the token (401): its sha256 must be in the server's admin.clients (printf %%s \"$TOKEN\" | sha256sum), with scope check", c.url)
		case http.StatusForbidden:
			return batchStats{}, usageErrorf("check --server %s: 403: %s", c.url, text)
		}
		return batchStats{}, &exitError{code: 2, err: fmt.Errorf("check --server %s: %s: %s", c.url, resp.Status, text)}
	}
	return tallyLines(resp.Body, w)
}

// tallyLines copies answer lines from r to w and counts them: an object
// with "error" is malformed, else a decision, denied unless "allow" is
// true.
func tallyLines(r io.Reader, w io.Writer) (batchStats, error) {
	var st batchStats
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		var err error
		line, err = br.ReadBytes('\n')
		if len(line) > 0 {
			var v struct {
				Allow bool    `json:"allow"`
				Error *string `json:"error"`
			}
			if jerr := json.Unmarshal(line, &v); jerr != nil {
				return st, fmt.Errorf("check --server: an answer line is not JSON: %w", jerr)
			}
			switch {
			case v.Error != nil:
				st.malformed++
			case v.Allow:
				st.decided++
			default:
				st.decided++
				st.denied++
			}
			if _, werr := w.Write(line); werr != nil {
				return st, fmt.Errorf("write decisions: %w", werr)
			}
		}
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("check --server: read the answer: %w", err)
		}
	}
}
