package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/egressd/egressd/audit"
)

// TestInspectGRPCThroughBinary: a gRPC client (grpc-go, h2 with trailers)
// calls a gRPC server through an inspected tunnel of the binary: the
// method its rule names succeeds, another is PermissionDenied, and the
// call is audited as an inspected request.
func TestInspectGRPCThroughBinary(t *testing.T) {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	up := StartTLSHandler(t, gs, true)
	t.Cleanup(gs.Stop)
	port := up.Port
	in := newInspecting(t, up)
	roots := exportedRoots(t, in.CADir)
	policy := WritePolicy(t, []Rule{{ID: "grpc-check", Hosts: []string{"example.com"}, Ports: []int{port},
		Methods: []string{"POST"}, Paths: []string{"/grpc.health.v1.Health/Check"}, Inspect: true}})
	e := Start(t, Options{PolicyDir: policy, DNS: in.DNS.Addr(), YAML: in.YAML})

	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", e.ProxyAddr)
		if err != nil {
			return nil, err
		}
		io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %v, %v", addr, resp, err)
		}
		return c, nil
	}
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///example.com:%d", port), grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Check = %v, %v; want SERVING", resp, err)
	}
	if _, err := hc.List(ctx, &healthpb.HealthListRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Health/List = %v; want PermissionDenied", err)
	}
	e.WaitRecords(t, "the inspected gRPC call", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTPDone && r.Inspected && r.Path == "/grpc.health.v1.Health/Check" && r.Status == 200
	})
}
