package deploy

import (
	"net"
	"slices"
	"strconv"
)

func isTrue(b *bool) bool { return b != nil && *b }

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// argAfter returns the argument following flag in args, or "".
func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func port(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
