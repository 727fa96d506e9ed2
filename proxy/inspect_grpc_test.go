package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
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

// TestInspectGRPCUnary: a gRPC client reaches a gRPC server through an
// inspected tunnel (h2 end to end, trailers carrying grpc-status), the
// allowed method by its path rule; a method the rule does not name is
// refused and the client sees PermissionDenied.
func TestInspectGRPCUnary(t *testing.T) {
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	t.Cleanup(gs.Stop)
	f := startInspect(t, gs, inspectOptions{})

	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", f.proxy)
		if err != nil {
			return nil, err
		}
		io.WriteString(c, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	conn, err := grpc.NewClient("passthrough:///example.com:"+f.port, grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: f.ca.pool(t, "anonymous")})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Check through the inspected tunnel = %v, %v; want SERVING", resp, err)
	}
	_, err = hc.List(ctx, &healthpb.HealthListRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Health/List (no rule) = %v; want PermissionDenied", err)
	}
	f.audit.WaitRecord(t, func(r audit.Record) bool {
		return r.Kind == audit.KindHTTPDone && r.Path == "/grpc.health.v1.Health/Check" && r.Status == http.StatusOK && r.Inspected
	})
}
