//go:build !linux

package audit

// preferWakeups has no portable equivalent outside Linux.
func preferWakeups() {}
