package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The body plane (issue 23): requests decided on what their bodies say,
// against inspected requests of the same size that no body rule reaches,
// on one inspecting egressd; and POST bodies streamed with secret
// detection on (a secret loaded, every request scanned) against off.

// padded is a body of size bytes: head, then x's, then tail.
func padded(size int, head, tail string) string {
	return head + strings.Repeat("x", max(0, size-len(head)-len(tail))) + tail
}

// post is a keep-alive POST of body to path, as the load generator sends
// it.
func post(path, body string) func(host string) []byte {
	return func(host string) []byte {
		return []byte("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: egressd-bench\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
}

// Bodies of the workload, 1 KiB each unless named otherwise.
var (
	mcpCall    = padded(1024, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_docs","arguments":{"query":"`, `"}}}`)
	modelCall  = padded(1024, `{"model":"gpt-4o-mini","max_completion_tokens":200,"messages":[{"role":"user","content":"`, `"}]}`)
	plainBody  = padded(1024, `{"data":"`, `"}`)
	plainMiB   = padded(1<<20, `{"data":"`, `"}`)
	benchValue = "bench-secret-" + strings.Repeat("7", 24)
)

func (b *bench) bodyWorkload() *Workload {
	wl := &Workload{ID: "body", Title: "keep-alive POST over inspected TLS: body rules and secret detection", Unit: "req/s",
		CPUUnit: "ms per 1,000 requests", Latency: true,
		Note: fmt.Sprintf("%d keep-alive connections, Go load generator, every request inspected and audited. "+
			"MCP tools/call and model request (1 KiB each): their bodies are read and decided on (rule keys mcp and llm), the answers filtered or read for usage; "+
			"POST 1 KiB: the same size, no body rule. Secret detection: the same POSTs with one secret loaded, every request body scanned as it streams.", b.o.conns)}
	base := wl.target("POST 1 KiB, no body rule", kindEgressd)
	mcp := wl.target("MCP tools/call 1 KiB", kindEgressd)
	mcp.Subject = true
	model := wl.target("model request 1 KiB", kindEgressd)
	scanOff := wl.target("POST 1 MiB, detection off", kindEgressd)
	scanOn1 := wl.target("POST 1 KiB, detection on", kindEgressd)
	scanOn := wl.target("POST 1 MiB, detection on", kindEgressd)

	e, roots, err := b.startInspecting()
	if err != nil {
		for _, t := range []*Target{base, mcp, model, scanOff} {
			t.fail("error: " + err.Error())
		}
	} else {
		defer e.stop()
	}
	es, sroots, err := b.startInspectingWith(egressdOpts{inspect: true, secret: benchValue})
	if err != nil {
		scanOn1.fail("error: " + err.Error())
		scanOn.fail("error: " + err.Error())
	} else {
		defer es.stop()
	}
	target := fmt.Sprintf("%s:%d", originName, b.org.inspected)
	for round := range b.o.rounds {
		if e != nil {
			b.loadRound(base, e, loadSpec{proxy: e.addr, target: target, roots: roots, request: post("/upload", plainBody)})
			b.withProfile(e, "body-mcp", round, b.o.duration-time.Second, func() {
				b.loadRound(mcp, e, loadSpec{proxy: e.addr, target: target, roots: roots, request: post("/mcp", mcpCall)})
			})
			b.loadRound(model, e, loadSpec{proxy: e.addr, target: target, roots: roots, request: post("/v1/chat/completions", modelCall)})
			b.loadRound(scanOff, e, loadSpec{proxy: e.addr, target: target, roots: roots, request: post("/upload", plainMiB)})
		}
		if es != nil {
			b.loadRound(scanOn1, es, loadSpec{proxy: es.addr, target: target, roots: sroots, request: post("/upload", plainBody)})
			b.loadRound(scanOn, es, loadSpec{proxy: es.addr, target: target, roots: sroots, request: post("/upload", plainMiB)})
		}
	}
	return wl
}

// secretSection is the secrets: section of an instance with one secret,
// written to a file beside its config.
func secretSection(dir, value string) (string, error) {
	p := filepath.Join(dir, "bench-secret")
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		return "", err
	}
	return fmt.Sprintf("secrets:\n  - name: bench\n    file: %s\n", p), nil
}
