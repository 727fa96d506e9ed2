//go:build !linux

package fdlimit

// countOpen is not implemented outside Linux: a Budget there admits every
// connection, and the EMFILE shedding of Listener still refuses promptly.
func countOpen() (int, error) { return 0, errUnsupported }
