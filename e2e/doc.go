// Package e2e holds egressd's black-box tests: they build the binary once,
// run it with generated configs on free loopback ports, and drive it with
// real clients (curl, Go net/http, Python urllib) against loopback
// upstreams. The harness (harness_test.go) is shared by every e2e file.
package e2e
