package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/proxy/broker"
)

// lineSink hands every line written to it to a channel.
type lineSink chan string

func (s lineSink) Write(p []byte) (int, error) {
	s <- string(p)
	return len(p), nil
}

// TestStdLogRoutedAndScrubbed: net/http's Transport prints an upstream's
// unsolicited bytes on an idle connection through the standard logger;
// with serve's logging that line is a JSON line of the operational log
// with the brokered secret it quoted replaced by the secret's name. It
// used to go to stderr as plain text, the secret with it.
func TestStdLogRoutedAndScrubbed(t *testing.T) {
	const secret = "ghp_SECRETvalue0123456789abcdef"
	s, err := broker.Load(broker.Config{{Name: "github", Env: "GH"}}, func(string) (string, bool) { return secret, true })
	if err != nil {
		t.Fatal(err)
	}
	sink := make(lineSink, 16)
	log, err := newLogger(config.Log{Level: "info", Format: "json"}, sink, broker.NewStore(s).Scrub)
	if err != nil {
		t.Fatal(err)
	}
	defer routeStdLog(log)()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	idle := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		<-idle
		// Bytes nobody asked for, on a connection in the client's pool.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Leak: "+secret+"\r\nContent-Length: 0\r\n\r\n")
		// Held open until the client closes it, so the client reads the
		// bytes rather than an EOF first.
		_, _ = io.Copy(io.Discard, c)
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	close(idle)

	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-sink:
			if strings.Contains(line, secret) {
				t.Fatalf("log line holds the secret: %s", line)
			}
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			msg, _ := e["msg"].(string)
			if !strings.Contains(msg, "Unsolicited response") {
				continue
			}
			if e["level"] != "warn" || e["logger"] != "stdlib" || !strings.Contains(msg, "«egressd:redacted:github»") {
				t.Errorf("log line %s; want a warn line of logger stdlib naming the secret", line)
			}
			return
		case <-timeout:
			t.Fatal("no unsolicited-response line was logged in 10s")
		}
	}
}
