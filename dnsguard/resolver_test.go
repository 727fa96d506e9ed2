package dnsguard

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/policy"
)

// testConfig is a resolver config for tests: short timeouts, TTLs honoured
// as served.
func testConfig(upstreams ...string) Config {
	c := DefaultConfig()
	c.Upstreams = upstreams
	c.Timeout = 300 * time.Millisecond
	c.Attempts = 1
	return c
}

func newTestResolver(t testing.TB, cfg Config, internal InternalConfig) (*Resolver, *Floor) {
	t.Helper()
	floor, err := NewFloor(internal)
	if err != nil {
		t.Fatalf("NewFloor: %v", err)
	}
	r, err := NewResolver(cfg, floor, zap.NewNop())
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	return r, floor
}

// denyReason returns the reason of a *policy.DenyError, or "" for nil and
// the error text for any other error.
func denyReason(err error) string {
	if err == nil {
		return ""
	}
	var de *policy.DenyError
	if errors.As(err, &de) {
		return de.Reason.String()
	}
	return "not a deny: " + err.Error()
}

var loopback2 = InternalConfig{{CIDR: "127.0.0.2", Ports: []uint16{80}, Action: "allow"}}

func TestResolve(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetRR("public.test", "public.test. 60 IN A 192.0.43.10", "public.test. 60 IN AAAA 2001:500:88:200::10")
	srv.SetRR("local.test", "local.test. 60 IN A 127.0.0.2")
	srv.SetRR("mixed.test", "mixed.test. 60 IN A 192.0.43.10", "mixed.test. 60 IN A 10.0.0.1")
	srv.SetRR("mixedv6.test", "mixedv6.test. 60 IN A 192.0.43.10", "mixedv6.test. 60 IN AAAA fd00:ec2::254")
	srv.SetRR("meta.test", "meta.test. 0 IN A 169.254.169.254")
	srv.SetRR("alias.test", "alias.test. 60 IN CNAME corp.internal.test.")
	srv.SetRR("corp.internal.test", "corp.internal.test. 60 IN A 10.1.2.3")
	srv.SetRR("alias-public.test", "alias-public.test. 60 IN CNAME public.test.")
	srv.SetRR("alias-meta.test", "alias-meta.test. 60 IN CNAME metadata.google.internal.")
	srv.SetRR("mapped-meta.test", "mapped-meta.test. 60 IN AAAA ::ffff:169.254.169.254")
	srv.SetRR("nat64-meta.test", "nat64-meta.test. 60 IN AAAA 64:ff9b::a9fe:a9fe")
	srv.SetRR("teredo-loop.test", "teredo-loop.test. 60 IN AAAA 2001:0:c000:201::80ff:fffe")
	srv.SetRR("mapped-local.test", "mapped-local.test. 60 IN AAAA ::ffff:127.0.0.2")
	srv.SetRR("sixto4-private.test", "sixto4-private.test. 60 IN AAAA 2002:a00:1::1")
	srv.SetRR("empty.test")
	srv.Set("truncated.test", dnstest.Entry{Answers: [][]string{{"truncated.test. 60 IN A 192.0.43.10"}}, TruncateUDP: true})
	srv.Set("servfail.test", dnstest.Entry{Rcode: 2})
	srv.Set("hop.test", dnstest.Entry{Answers: [][]string{{"hop.test. 60 IN CNAME public.test."}}, NoFollow: true})
	srv.Set("hop-private.test", dnstest.Entry{Answers: [][]string{{"hop-private.test. 60 IN CNAME corp.internal.test."}}, NoFollow: true})
	srv.Set("hop-meta.test", dnstest.Entry{Answers: [][]string{{"hop-meta.test. 60 IN CNAME hop-meta2.test."}}, NoFollow: true})
	srv.Set("hop-meta2.test", dnstest.Entry{Answers: [][]string{{"hop-meta2.test. 60 IN CNAME instance-data.ec2.internal."}}, NoFollow: true})
	srv.SetRR("loop-a.test", "loop-a.test. 60 IN CNAME loop-b.test.", "loop-b.test. 60 IN CNAME loop-a.test.")

	r, _ := newTestResolver(t, testConfig(srv.Addr()), loopback2)
	tests := []struct {
		name   string
		host   string
		want   []string
		reason string
		detail string
	}{
		{name: "public A and AAAA", host: "public.test", want: []string{"192.0.43.10", "2001:500:88:200::10"}},
		{name: "trailing dot and case", host: "PUBLIC.test.", want: []string{"192.0.43.10", "2001:500:88:200::10"}},
		{name: "internal allow", host: "local.test", want: []string{"127.0.0.2"}},
		{name: "mixed public and private", host: "mixed.test", reason: "private_address", detail: "10.0.0.1 is private"},
		{name: "mixed v4 public and v6 metadata", host: "mixedv6.test", reason: "metadata_address", detail: "fd00:ec2::254 is metadata"},
		{name: "metadata", host: "meta.test", reason: "metadata_address", detail: "169.254.169.254 is metadata"},
		{name: "cname to internal name", host: "alias.test", reason: "private_address", detail: "10.1.2.3 is private"},
		{name: "cname to public", host: "alias-public.test", want: []string{"192.0.43.10", "2001:500:88:200::10"}},
		{name: "cname answered by another query", host: "hop.test", want: []string{"192.0.43.10", "2001:500:88:200::10"}},
		{name: "cname to internal name by another query", host: "hop-private.test", reason: "private_address"},
		{name: "cname chain to metadata name across queries", host: "hop-meta.test", reason: "metadata_name"},
		{name: "cname to metadata name", host: "alias-meta.test", reason: "metadata_name"},
		{name: "metadata name", host: "metadata.google.internal", reason: "metadata_name"},
		{name: "aaaa-only mapped metadata", host: "mapped-meta.test", reason: "metadata_address"},
		{name: "aaaa-only nat64 metadata", host: "nat64-meta.test", reason: "metadata_address"},
		{name: "aaaa-only teredo loopback", host: "teredo-loop.test", reason: "loopback_address"},
		{name: "aaaa-only 6to4 private", host: "sixto4-private.test", reason: "private_address"},
		{name: "aaaa-only mapped allowed", host: "mapped-local.test", want: []string{"127.0.0.2"}},
		{name: "no records", host: "empty.test", reason: "dns_no_address"},
		{name: "nxdomain", host: "missing.test", reason: "dns_nxdomain"},
		{name: "truncated needs tcp", host: "truncated.test", want: []string{"192.0.43.10"}},
		{name: "servfail", host: "servfail.test", reason: "dns_failure"},
		{name: "cname loop", host: "loop-a.test", reason: "cname_chain_too_long"},
		{name: "ip literal allowed", host: "127.0.0.2", want: []string{"127.0.0.2"}},
		{name: "ip literal metadata", host: "169.254.169.254", reason: "metadata_address"},
		{name: "bracketed mapped metadata", host: "[::ffff:169.254.169.254]", reason: "metadata_address"},
		{name: "zoned literal", host: "fe80::1%eth0", reason: "zoned_address"},
		{name: "malformed name", host: "a..b", reason: "malformed_name"},
		{name: "binary label", host: "a\\000.test", reason: "malformed_name"},
		{name: "long label", host: strings.Repeat("a", 64) + ".test", reason: "label_too_long"},
		{name: "long name", host: strings.Repeat("abcdefghi.", 26) + "test", reason: "name_too_long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Resolve(context.Background(), tt.host)
			if reason := denyReason(err); reason != tt.reason {
				t.Fatalf("Resolve(%q) error = %v; want reason %q", tt.host, err, tt.reason)
			}
			if tt.detail != "" && !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("Resolve(%q) error = %v; want it to name %q", tt.host, err, tt.detail)
			}
			var gotS []string
			for _, a := range got {
				gotS = append(gotS, a.String())
			}
			if !slices.Equal(gotS, tt.want) {
				t.Errorf("Resolve(%q) = %v; want %v", tt.host, gotS, tt.want)
			}
		})
	}
}

func TestResolveCache(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetRR("cached.test", "cached.test. 60 IN A 192.0.43.10")
	srv.SetRR("zero.test", "zero.test. 0 IN A 192.0.43.10")
	r, _ := newTestResolver(t, testConfig(srv.Addr()), nil)
	ctx := context.Background()
	for range 3 {
		if _, err := r.Resolve(ctx, "cached.test"); err != nil {
			t.Fatalf("Resolve(cached.test) = %v", err)
		}
		if _, err := r.Resolve(ctx, "zero.test"); err != nil {
			t.Fatalf("Resolve(zero.test) = %v", err)
		}
		if _, err := r.Resolve(ctx, "gone.test"); denyReason(err) != "dns_nxdomain" {
			t.Fatalf("Resolve(gone.test) = %v; want dns_nxdomain", err)
		}
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"cached.test", 2}, // A + AAAA once
		{"zero.test", 6},   // TTL 0: asked every time
		{"gone.test", 2},   // negative answer cached
	} {
		if got := srv.Queries(c.name); got != c.want {
			t.Errorf("queries for %s = %d; want %d", c.name, got, c.want)
		}
	}
}

func TestResolveMinTTL(t *testing.T) {
	srv := dnstest.Start(t)
	srv.SetRR("zero.test", "zero.test. 0 IN A 192.0.43.10")
	cfg := testConfig(srv.Addr())
	cfg.MinTTL = time.Minute
	r, _ := newTestResolver(t, cfg, nil)
	for range 3 {
		if _, err := r.Resolve(context.Background(), "zero.test"); err != nil {
			t.Fatalf("Resolve(zero.test) = %v", err)
		}
	}
	if got := srv.Queries("zero.test"); got != 2 {
		t.Errorf("queries for zero.test with min_ttl = %d; want 2", got)
	}
}

func TestResolveSingleflight(t *testing.T) {
	srv := dnstest.Start(t)
	srv.Set("slow.test", dnstest.Entry{Answers: [][]string{{"slow.test. 60 IN A 192.0.43.10"}}, Delay: 100 * time.Millisecond})
	r, _ := newTestResolver(t, testConfig(srv.Addr()), nil)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := r.Resolve(context.Background(), "slow.test")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Resolve(slow.test) = %v", err)
		}
	}
	if got := srv.Queries("slow.test"); got != 2 {
		t.Errorf("queries for slow.test from 20 callers = %d; want 2", got)
	}
}

func TestResolveSlowUpstream(t *testing.T) {
	slow := dnstest.Start(t)
	slow.Set("x.test", dnstest.Entry{Answers: [][]string{{"x.test. 60 IN A 192.0.43.10"}}, Delay: 2 * time.Second})
	fast := dnstest.Start(t)
	fast.SetRR("x.test", "x.test. 60 IN A 192.0.43.11")

	t.Run("retry on the next upstream", func(t *testing.T) {
		r, _ := newTestResolver(t, testConfig(slow.Addr(), fast.Addr()), nil)
		got, err := r.Resolve(context.Background(), "x.test")
		if err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("192.0.43.11") {
			t.Errorf("Resolve(x.test) = %v, %v; want [192.0.43.11]", got, err)
		}
	})
	t.Run("only slow upstream", func(t *testing.T) {
		r, _ := newTestResolver(t, testConfig(slow.Addr()), nil)
		if _, err := r.Resolve(context.Background(), "x.test"); denyReason(err) != "dns_failure" {
			t.Errorf("Resolve(x.test) = %v; want dns_failure", err)
		}
	})
	t.Run("caller gives up", func(t *testing.T) {
		r, _ := newTestResolver(t, testConfig(slow.Addr()), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := r.Resolve(ctx, "x.test")
		if denyReason(err) != "dns_failure" || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Resolve(x.test) = %v; want dns_failure wrapping the deadline", err)
		}
	})
}

func TestNewResolverConfig(t *testing.T) {
	floor, _ := NewFloor(nil)
	if _, err := NewResolver(Config{}, nil, zap.NewNop()); err == nil {
		t.Error("NewResolver(nil floor) = nil error; want an error")
	}
	r, err := NewResolver(Config{Upstreams: []string{"127.0.0.1:53"}}, floor, zap.NewNop())
	if err != nil {
		t.Fatalf("NewResolver(zero config) = %v", err)
	}
	if r.cfg.Timeout != 2*time.Second || r.cfg.MaxCNAME != 8 {
		t.Errorf("NewResolver(zero config) timeout, max_cname = %v, %d; want defaults", r.cfg.Timeout, r.cfg.MaxCNAME)
	}
}

func BenchmarkResolveCached(b *testing.B) {
	srv := dnstest.Start(b)
	srv.SetRR("cached.test", "cached.test. 300 IN A 192.0.43.10", "cached.test. 300 IN AAAA 2001:500:88:200::10")
	r, _ := newTestResolver(b, testConfig(srv.Addr()), nil)
	ctx := context.Background()
	if _, err := r.Resolve(ctx, "cached.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve(ctx, "cached.test"); err != nil {
			b.Fatal(err)
		}
	}
}
