package dnsguard

import (
	"net/netip"
	"strings"
	"testing"
)

func TestFloorCheck(t *testing.T) {
	internal := InternalConfig{
		{CIDR: "10.20.0.0/16", Ports: []uint16{8080, 9090}, Action: "allow"},
		// A broad allow listed after a narrower deny, and a narrow allow
		// inside a broad deny: the deny wins both times.
		{CIDR: "10.20.5.0/24", Action: "deny"},
		{CIDR: "192.168.0.0/16", Action: "deny"},
		{CIDR: "192.168.1.10/32", Ports: []uint16{443}, Action: "allow"},
		{CIDR: "fd12::/64", Ports: []uint16{443}, Action: "allow"},
		{CIDR: "::ffff:127.0.0.0/104", Ports: []uint16{8000}, Action: "allow"},
		// An allow cannot open metadata.
		{CIDR: "169.254.0.0/16", Ports: []uint16{80}, Action: "allow"},
		{CIDR: "198.51.100.7", Ports: []uint16{443}, Action: "deny"},
		{CIDR: "203.0.113.0/24", Action: "deny"},
		{CIDR: "1.2.3.0/24", Action: "deny"},
	}
	f, err := NewFloor(internal)
	if err != nil {
		t.Fatalf("NewFloor: %v", err)
	}
	tests := []struct {
		name   string
		addr   string
		port   uint16
		reason string
	}{
		{"public", "192.0.43.10", 443, ""},
		{"internal allow", "10.20.1.1", 8080, ""},
		{"internal allow second port", "10.20.1.1", 9090, ""},
		{"internal wrong port", "10.20.1.1", 22, "internal_port_not_allowed"},
		{"deny beats broader allow", "10.20.5.1", 8080, "internal_denied"},
		{"deny beats narrower allow", "192.168.1.10", 443, "internal_denied"},
		{"private outside allow", "10.21.0.1", 8080, "private_address"},
		{"ula allow", "fd12::1", 443, ""},
		{"ula outside allow", "fd13::1", 443, "ula_address"},
		{"mapped rule unmapped address", "127.0.0.1", 8000, ""},
		{"mapped address", "::ffff:127.0.0.1", 8000, ""},
		{"loopback other port", "127.0.0.1", 8001, "internal_port_not_allowed"},
		{"metadata beats allow", "169.254.169.254", 80, "metadata_address"},
		{"link-local allowed", "169.254.1.1", 80, ""},
		{"mapped metadata", "::ffff:169.254.169.254", 80, "metadata_address"},
		{"port-specific deny of a documentation address", "198.51.100.7", 443, "internal_denied"},
		{"documentation without allow", "198.51.100.7", 80, "documentation_address"},
		{"deny of public range", "1.2.3.4", 443, "internal_denied"},
		{"deny of public range via nat64", "64:ff9b::102:304", 443, "internal_denied"},
		{"deny of public range via 6to4", "2002:102:304::1", 443, "internal_denied"},
		{"zone", "fe80::1%eth0", 443, "zoned_address"},
		{"azure wireserver", "168.63.129.16", 80, "metadata_address"},
		{"cgnat", "100.64.0.1", 443, "cgnat_address"},
		{"multicast", "224.0.0.1", 443, "multicast_address"},
		{"broadcast", "255.255.255.255", 443, "broadcast_address"},
		{"unspecified", "0.0.0.0", 443, "unspecified_address"},
		{"unspecified v6", "::", 443, "unspecified_address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.Check(netip.MustParseAddr(tt.addr), tt.port)
			if got := denyReason(err); got != tt.reason {
				t.Errorf("Check(%s, %d) = %v; want reason %q", tt.addr, tt.port, err, tt.reason)
			}
			if err != nil && !strings.Contains(err.Error(), netip.MustParseAddr(tt.addr).Unmap().String()) {
				t.Errorf("Check(%s, %d) = %v; want the address named", tt.addr, tt.port, err)
			}
		})
	}
}

func TestFloorCheckAddr(t *testing.T) {
	f, err := NewFloor(InternalConfig{
		{CIDR: "10.0.0.0/8", Ports: []uint16{443}, Action: "allow"},
		{CIDR: "10.9.0.0/16", Ports: []uint16{443}, Action: "deny"},
		{CIDR: "10.8.0.0/16", Action: "deny"},
	})
	if err != nil {
		t.Fatalf("NewFloor: %v", err)
	}
	for _, c := range []struct{ addr, reason string }{
		{"10.1.1.1", ""},
		{"10.9.1.1", ""}, // denied on 443 only: known at dial time
		{"10.8.1.1", "internal_denied"},
		{"127.0.0.1", "loopback_address"},
	} {
		if got := denyReason(f.checkAddr(netip.MustParseAddr(c.addr))); got != c.reason {
			t.Errorf("checkAddr(%s) reason = %q; want %q", c.addr, got, c.reason)
		}
	}
}

func TestInternalConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    InternalConfig
		want string
	}{
		{"empty", nil, ""},
		{"good", InternalConfig{{CIDR: "10.0.0.0/8", Ports: []uint16{1}, Action: "allow"}, {CIDR: "fd00::1", Action: "deny"}}, ""},
		{"bad cidr", InternalConfig{{CIDR: "10.0.0.0/33", Ports: []uint16{1}, Action: "allow"}}, `[0].cidr must be an address or prefix, got "10.0.0.0/33"`},
		{"zone", InternalConfig{{CIDR: "fe80::1%eth0", Ports: []uint16{1}, Action: "allow"}}, `[0].cidr must be an address or prefix, got "fe80::1%eth0"`},
		{"allow without ports", InternalConfig{{CIDR: "10.0.0.1", Action: "allow"}}, "[0].ports must list at least one port for an allow"},
		{"port zero", InternalConfig{{CIDR: "10.0.0.1", Ports: []uint16{0}, Action: "allow"}}, "[0].ports must be 1-65535, got 0"},
		{"bad action", InternalConfig{{CIDR: "10.0.0.1", Ports: []uint16{1}, Action: "permit"}}, `[0].action must be allow or deny, got "permit"`},
		// Issue 25 item 5: an allow the floor would never honour.
		{"metadata allow", InternalConfig{{CIDR: "10.0.0.0/8", Ports: []uint16{1}, Action: "allow"}, {CIDR: "169.254.169.254", Ports: []uint16{80}, Action: "allow"}},
			`[1].cidr "169.254.169.254" is a cloud metadata address, which no sandbox may reach (refused as metadata_address whatever internal: allows): remove the entry`},
		{"metadata allow /32", InternalConfig{{CIDR: "168.63.129.16/32", Ports: []uint16{80}, Action: "allow"}}, `[0].cidr "168.63.129.16/32" is a cloud metadata address`},
		{"metadata allow v6", InternalConfig{{CIDR: "fd00:ec2::254", Ports: []uint16{80}, Action: "allow"}}, `[0].cidr "fd00:ec2::254" is a cloud metadata address`},
		{"metadata allow mapped", InternalConfig{{CIDR: "::ffff:169.254.169.254", Ports: []uint16{80}, Action: "allow"}}, `[0].cidr "::ffff:169.254.169.254" is a cloud metadata address`},
		{"metadata deny", InternalConfig{{CIDR: "169.254.169.254", Action: "deny"}}, ""},
		{"subnet holding metadata", InternalConfig{{CIDR: "169.254.0.0/16", Ports: []uint16{80}, Action: "allow"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := tt.c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want && (tt.want == "" || !strings.HasPrefix(got, tt.want)) {
				t.Errorf("Validate() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestIsMetadataName(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"metadata.google.internal", true},
		{"metadata", true},
		{"instance-data", true},
		{"instance-data.ec2.internal", true},
		{"instance-data.us-west-2.compute.internal", true},
		{"metadata.azure.internal", true},
		{"metadata.example.com", false},
		{"api.github.com", false},
	} {
		if got := IsMetadataName(c.name); got != c.want {
			t.Errorf("IsMetadataName(%q) = %v; want %v", c.name, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero", func(c *Config) { *c = Config{} }, ""},
		{"upstream", func(c *Config) { c.Upstreams = []string{"dns.example:53"} }, `upstreams[0] must be IP:port, got "dns.example:53"`},
		{"listen", func(c *Config) { c.Listen = ":53" }, `listen must be IP:port, got ":53"`},
		{"timeout", func(c *Config) { c.Timeout = -1 }, `timeout must be >= 0, got "-1ns"`},
		{"ttl order", func(c *Config) { c.MinTTL = c.MaxTTL + 1 }, `min_ttl must be <= max_ttl (5m0s), got "5m0.000000001s"`},
		{"attempts", func(c *Config) { c.Attempts = 11 }, "attempts must be between 0 and 10, got 11"},
		{"refuse", func(c *Config) { c.Refuse = "drop" }, `refuse must be refused or nxdomain, got "drop"`},
		{"rate", func(c *Config) { c.RateLimit = -1 }, "rate_limit must be >= 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestFloorCheckAllocs(t *testing.T) {
	f, err := NewFloor(InternalConfig{
		{CIDR: "10.0.0.0/8", Ports: []uint16{443}, Action: "allow"},
		{CIDR: "1.2.3.0/24", Action: "deny"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pub, internal := netip.MustParseAddr("192.0.43.10"), netip.MustParseAddr("10.1.1.1")
	if n := testing.AllocsPerRun(100, func() {
		if f.Check(pub, 443) != nil || f.Check(internal, 443) != nil {
			t.Fatal("Check denied an allowed address")
		}
	}); n != 0 {
		t.Errorf("Check allocs on allow = %v; want 0", n)
	}
}

func TestFloorUpdate(t *testing.T) {
	svc := netip.MustParseAddr("10.0.0.7")
	f, err := NewFloor(InternalConfig{{CIDR: "10.0.0.7", Ports: []uint16{5432}, Action: "allow"}})
	if err != nil {
		t.Fatalf("NewFloor: %v", err)
	}
	if err := f.Check(svc, 5432); err != nil {
		t.Fatalf("Check(%s, 5432) before Update = %v; want nil", svc, err)
	}
	if err := f.Update(InternalConfig{{CIDR: "10.0.0.0/8", Ports: []uint16{80}, Action: "nonsense"}}); err == nil {
		t.Fatal("Update(invalid) = nil; want an error")
	}
	if err := f.Check(svc, 5432); err != nil {
		t.Errorf("Check after a refused Update = %v; want nil (the old rules stay)", err)
	}
	if err := f.Update(nil); err != nil {
		t.Fatalf("Update(nil) = %v", err)
	}
	if err := f.Check(svc, 5432); err == nil || !strings.Contains(err.Error(), "private") {
		t.Errorf("Check after the allowance was removed = %v; want a private_address deny", err)
	}
}

// TestCoversInternal: a prefix is covered only when one allow entry holds
// all of it on that port, no deny touches it, and it is not public.
func TestCoversInternal(t *testing.T) {
	f, err := NewFloor(InternalConfig{
		{CIDR: "10.20.0.0/16", Ports: []uint16{8080}, Action: "allow"},
		{CIDR: "10.20.9.0/24", Action: "deny"},
		{CIDR: "140.82.112.0/24", Ports: []uint16{80}, Action: "allow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		prefix string
		port   uint16
		want   bool
	}{
		{"address inside", "10.20.1.2/32", 8080, true},
		{"prefix inside", "10.20.3.0/24", 8080, true},
		{"other port", "10.20.1.2/32", 80, false},
		{"wider than the entry", "10.0.0.0/8", 8080, false},
		{"touched by a deny", "10.20.8.0/23", 8080, false},
		{"outside", "10.30.0.1/32", 8080, false},
		{"public address allowed by an entry", "140.82.112.5/32", 80, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.CoversInternal(netip.MustParsePrefix(tt.prefix), tt.port); got != tt.want {
				t.Errorf("CoversInternal(%s, %d) = %v; want %v", tt.prefix, tt.port, got, tt.want)
			}
		})
	}
}
