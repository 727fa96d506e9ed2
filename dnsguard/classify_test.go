package dnsguard

import (
	"net/netip"
	"testing"
)

var classifyTests = []struct {
	name string
	addr string
	want Category
}{
	// Every IPv4 range at both edges, and the public neighbours outside.
	{"this network low", "0.0.0.1", ThisNetwork},
	{"this network high", "0.255.255.255", ThisNetwork},
	{"unspecified v4", "0.0.0.0", Unspecified},
	{"public below 10/8", "9.255.255.255", Public},
	{"private 10 low", "10.0.0.0", Private},
	{"private 10 high", "10.255.255.255", Private},
	{"public above 10/8", "11.0.0.0", Public},
	{"public below cgnat", "100.63.255.255", Public},
	{"cgnat low", "100.64.0.0", CGNAT},
	{"cgnat high", "100.127.255.255", CGNAT},
	{"public above cgnat", "100.128.0.0", Public},
	{"public below loopback", "126.255.255.255", Public},
	{"loopback low", "127.0.0.0", Loopback},
	{"loopback one", "127.0.0.1", Loopback},
	{"loopback high", "127.255.255.255", Loopback},
	{"public above loopback", "128.0.0.0", Public},
	{"public below link-local", "169.253.255.255", Public},
	{"link-local low", "169.254.0.0", LinkLocal},
	{"link-local high", "169.254.255.255", LinkLocal},
	{"public above link-local", "169.255.0.0", Public},
	{"public below 172.16/12", "172.15.255.255", Public},
	{"private 172 low", "172.16.0.0", Private},
	{"private 172 high", "172.31.255.255", Private},
	{"public above 172.16/12", "172.32.0.0", Public},
	{"reserved 192.0.0 low", "192.0.0.0", Reserved},
	{"reserved 192.0.0 high", "192.0.0.255", Reserved},
	{"documentation 192.0.2 low", "192.0.2.0", Documentation},
	{"documentation 192.0.2 high", "192.0.2.255", Documentation},
	{"public 192.0.3.0", "192.0.3.0", Public},
	{"6to4 relay low", "192.88.99.0", Reserved},
	{"6to4 relay high", "192.88.99.255", Reserved},
	{"public below 192.168/16", "192.167.255.255", Public},
	{"private 192.168 low", "192.168.0.0", Private},
	{"private 192.168 high", "192.168.255.255", Private},
	{"public above 192.168/16", "192.169.0.0", Public},
	{"public below benchmarking", "198.17.255.255", Public},
	{"benchmarking low", "198.18.0.0", Benchmarking},
	{"benchmarking high", "198.19.255.255", Benchmarking},
	{"public above benchmarking", "198.20.0.0", Public},
	{"documentation 198.51.100 low", "198.51.100.0", Documentation},
	{"documentation 198.51.100 high", "198.51.100.255", Documentation},
	{"documentation 203.0.113 low", "203.0.113.0", Documentation},
	{"documentation 203.0.113 high", "203.0.113.255", Documentation},
	{"public below multicast", "223.255.255.255", Public},
	{"multicast low", "224.0.0.0", Multicast},
	{"multicast high", "239.255.255.255", Multicast},
	{"reserved 240 low", "240.0.0.0", Reserved},
	{"reserved 240 high", "255.255.255.254", Reserved},
	{"broadcast", "255.255.255.255", Broadcast},
	{"public dns", "8.8.8.8", Public},
	{"public as112", "192.31.196.1", Public},

	// Metadata, by address, including those outside link-local.
	{"aws imds", "169.254.169.254", Metadata},
	{"aws dns", "169.254.169.253", Metadata},
	{"aws time", "169.254.169.123", Metadata},
	{"aws outposts", "169.254.169.250", Metadata},
	{"ecs credentials", "169.254.170.2", Metadata},
	{"eks pod identity", "169.254.170.23", Metadata},
	{"tencent", "169.254.0.23", Metadata},
	{"scaleway", "169.254.42.42", Metadata},
	{"alibaba", "100.100.100.200", Metadata},
	{"oracle", "192.0.0.192", Metadata},
	{"azure wireserver", "168.63.129.16", Metadata},
	{"azure wireserver neighbour", "168.63.129.17", Public},
	{"imds neighbour", "169.254.169.255", LinkLocal},
	{"aws imds v6", "fd00:ec2::254", Metadata},
	{"aws dns v6", "fd00:ec2::253", Metadata},
	{"aws time v6", "fd00:ec2::123", Metadata},
	{"eks pod identity v6", "fd00:ec2::23", Metadata},
	{"gcp v6", "fd20:ce::254", Metadata},
	{"scaleway v6", "fd00:42::42", Metadata},
	{"imds v6 neighbour", "fd00:ec2::255", ULA},

	// IPv6 ranges at their edges.
	{"unspecified v6", "::", Unspecified},
	{"loopback v6", "::1", Loopback},
	{"discard low", "100::", Reserved},
	{"discard high", "100::ffff:ffff:ffff:ffff", Reserved},
	{"dummy prefix", "100:0:0:1::1", Reserved},
	{"ietf 2001::/23 high", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
	{"public above 2001::/23", "2001:200::", Public},
	{"benchmarking v6 low", "2001:2::", Benchmarking},
	{"benchmarking v6 high", "2001:2:0:ffff:ffff:ffff:ffff:ffff", Benchmarking},
	{"documentation v6 low", "2001:db8::", Documentation},
	{"documentation v6 high", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Documentation},
	{"documentation 3fff low", "3fff::", Documentation},
	{"documentation 3fff high", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", Documentation},
	{"public above 3fff::/20", "3fff:1000::", Public},
	{"srv6", "5f00::1", Reserved},
	{"public below ula", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved},
	{"ula low", "fc00::", ULA},
	{"ula high", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ULA},
	{"link-local v6 low", "fe80::", LinkLocal},
	{"link-local v6 high", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal},
	{"site-local low", "fec0::", Private},
	{"site-local high", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private},
	{"multicast v6 low", "ff00::", Multicast},
	{"multicast v6 high", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast},
	{"global unicast low", "2000::", Public},
	{"global unicast high", "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public},
	{"unallocated 4000::/3", "4000::1", Reserved},
	{"unallocated ::/8 rest", "::1:0:0:1", Reserved},
	{"public v6", "2606:4700::1111", Public},
}

// embeddedForms writes v4 in every IPv4-embedding IPv6 form.
func embeddedForms(v4 string) []struct{ form, addr string } {
	a := netip.MustParseAddr(v4).As4()
	obf := [4]byte{^a[0], ^a[1], ^a[2], ^a[3]}
	f := func(b [16]byte) string { return netip.AddrFrom16(b).String() }
	var mapped, compat, nat64, nat64local96, nat64local48, nat64local56, nat64local64, sixto4, teredo [16]byte
	mapped[10], mapped[11] = 0xff, 0xff
	copy(mapped[12:], a[:])
	copy(compat[12:], a[:])
	copy(nat64[:], []byte{0, 0x64, 0xff, 0x9b})
	copy(nat64[12:], a[:])
	local := []byte{0, 0x64, 0xff, 0x9b, 0, 1}
	copy(nat64local96[:], local)
	copy(nat64local96[12:], a[:])
	copy(nat64local48[:], local)
	nat64local48[6], nat64local48[7], nat64local48[9], nat64local48[10] = a[0], a[1], a[2], a[3]
	copy(nat64local56[:], local)
	nat64local56[7], nat64local56[9], nat64local56[10], nat64local56[11] = a[0], a[1], a[2], a[3]
	copy(nat64local64[:], local)
	copy(nat64local64[9:], a[:])
	sixto4[0], sixto4[1] = 0x20, 0x02
	copy(sixto4[2:], a[:])
	teredo[0], teredo[1] = 0x20, 0x01
	copy(teredo[4:], []byte{192, 0, 2, 1}) // server address; the client is what counts
	copy(teredo[12:], obf[:])
	return []struct{ form, addr string }{
		{"mapped", f(mapped)},
		{"compatible", f(compat)},
		{"nat64", f(nat64)},
		{"nat64 local /96", f(nat64local96)},
		{"nat64 local /48", f(nat64local48)},
		{"nat64 local /56", f(nat64local56)},
		{"nat64 local /64", f(nat64local64)},
		{"6to4", f(sixto4)},
		{"teredo", f(teredo)},
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range classifyTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("Classify(%s) = %s; want %s", tt.addr, got, tt.want)
			}
		})
	}
}

func TestClassifyEmbedded(t *testing.T) {
	for _, v4 := range []struct {
		addr string
		want Category
	}{
		{"127.0.0.1", Loopback},
		{"10.0.0.1", Private},
		{"169.254.169.254", Metadata},
		{"168.63.129.16", Metadata},
		{"8.8.8.8", Public},
	} {
		for _, e := range embeddedForms(v4.addr) {
			if v4.want == Public && ambiguousLayout[e.form] {
				continue
			}
			t.Run(e.form+" "+v4.addr, func(t *testing.T) {
				if got := Classify(netip.MustParseAddr(e.addr)); got != v4.want {
					t.Errorf("Classify(%s) = %s; want %s", e.addr, got, v4.want)
				}
			})
		}
	}
}

// ambiguousLayout are the local-use NAT64 layouts whose zero suffix also
// reads as 0.0.0.0 in the /96 layout: a public address written in them is
// not provably public.
var ambiguousLayout = map[string]bool{"nat64 local /48": true, "nat64 local /56": true}

func TestClassifyNAT64LocalAmbiguous(t *testing.T) {
	for _, e := range embeddedForms("8.8.8.8") {
		if !ambiguousLayout[e.form] {
			continue
		}
		t.Run(e.form, func(t *testing.T) {
			if got := Classify(netip.MustParseAddr(e.addr)); got == Public {
				t.Errorf("Classify(%s) = public; want a non-public reading to win", e.addr)
			}
		})
	}
}

func TestClassifyNAT64LocalWorstLayout(t *testing.T) {
	// 64:ff9b:1:a9fe:a9:fe00:: reads as 0.0.0.0 in the /96 layout and as
	// 169.254.169.254 in the /48 one: the metadata reading wins.
	a := netip.MustParseAddr("64:ff9b:1:a9fe:a9:fe00::")
	if got := Classify(a); got != Metadata {
		t.Errorf("Classify(%s) = %s; want metadata", a, got)
	}
}

func TestClassifyInvalid(t *testing.T) {
	if got := Classify(netip.Addr{}); got != Reserved {
		t.Errorf("Classify(invalid) = %s; want reserved", got)
	}
}

func TestClassifyAllocs(t *testing.T) {
	addrs := []netip.Addr{
		netip.MustParseAddr("8.8.8.8"),
		netip.MustParseAddr("64:ff9b:1::a9fe:a9fe"),
		netip.MustParseAddr("2606:4700::1111"),
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, a := range addrs {
			Classify(a)
		}
	}); n != 0 {
		t.Errorf("Classify allocs = %v; want 0", n)
	}
}

func BenchmarkClassify(b *testing.B) {
	table := make([]netip.Addr, len(classifyTests))
	for i, tt := range classifyTests {
		table[i] = netip.MustParseAddr(tt.addr)
	}
	for _, c := range []struct {
		name  string
		addrs []netip.Addr
	}{
		{"table", table},
		{"public_v4", []netip.Addr{netip.MustParseAddr("192.0.43.10")}},
		{"metadata_v4", []netip.Addr{netip.MustParseAddr("169.254.169.254")}},
		{"public_v6", []netip.Addr{netip.MustParseAddr("2606:4700::1111")}},
		{"nat64_local_v6", []netip.Addr{netip.MustParseAddr("64:ff9b:1:a9fe:a9:fe00::")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				Classify(c.addrs[i%len(c.addrs)])
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	for _, tt := range classifyTests {
		f.Add(netip.MustParseAddr(tt.addr).AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		c := Classify(a)
		if c >= numCategories {
			t.Fatalf("Classify(%s) = %d; want a known category", a, c)
		}
		// The mapped form of an IPv4 address is always the same category.
		if a.Is4() {
			if m := Classify(netip.AddrFrom16(a.As16())); m != c {
				t.Fatalf("Classify(%s) = %s but its mapped form is %s", a, c, m)
			}
		}
		// Nothing non-public gets past the floor without an allow.
		err := (&Floor{}).Check(a, 443)
		if (c == Public) != (err == nil) {
			t.Fatalf("Check(%s) = %v for category %s", a, err, c)
		}
	})
}
