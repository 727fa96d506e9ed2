package policy

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
)

// ruleKeys are the keys a data.rules entry may have, in ruleSpec's order:
// read from its json tags, so that the list an unknown key's error gives
// is the one the decoder accepts.
var ruleKeys = func() []string {
	t := reflect.TypeFor[ruleSpec]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}()

// unknownRuleKey is the error for a rule key the decoder refused (key as
// the decoder quotes it): every key a rule has, and the nearest of them
// when one is close enough to be a typo.
func unknownRuleKey(key string) string {
	msg := "a rule has " + strings.Join(ruleKeys[:len(ruleKeys)-1], ", ") + " and " + ruleKeys[len(ruleKeys)-1]
	if k, err := strconv.Unquote(key); err == nil {
		if near := nearest(k, ruleKeys); near != "" {
			return fmt.Sprintf("did you mean %q? %s", near, msg)
		}
	}
	return msg
}

// nearest is the one of keys closest to s by edit distance, if within a
// third of s's length (at least 1); "" when none is, or when two tie.
func nearest(s string, keys []string) string {
	best, bestD, tie := "", max(1, len(s)/3)+1, false
	for _, k := range keys {
		switch d := editDistance(strings.ToLower(s), k); {
		case d < bestD:
			best, bestD, tie = k, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes (keys are
// ASCII). It is quadratic: callers pass short keys.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// hostWrittenAsTarget says what to write instead when a rule host is a
// URL or host:port, which rules spell as a host and separate ports; ""
// when h is neither.
func hostWrittenAsTarget(h string) string {
	if scheme, rest, ok := strings.Cut(h, "://"); ok {
		host, _, _ := strings.Cut(rest, "/")
		host, port := splitPort(host)
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(scheme)]
		}
		if port == "" {
			return fmt.Sprintf("is a URL: write its host %q in hosts and its port in ports", host)
		}
		return fmt.Sprintf("is a URL: write its host %q in hosts and its port %s in ports", host, port)
	}
	if host, port := splitPort(h); port != "" {
		return fmt.Sprintf("is host:port: write the host %q in hosts and the port %s in ports", host, port)
	}
	return ""
}

// splitPort splits "host:port" or "[v6]:port" with a numeric port; port
// is "" (and host h) otherwise, so that a bare IPv6 address stays whole.
func splitPort(h string) (host, port string) {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().String(), strconv.Itoa(int(ap.Port()))
	}
	i := strings.LastIndexByte(h, ':')
	if i < 0 || strings.Contains(h[:i], ":") {
		return h, ""
	}
	if _, err := strconv.ParseUint(h[i+1:], 10, 16); err != nil {
		return h, ""
	}
	return h[:i], h[i+1:]
}
