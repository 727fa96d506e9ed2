//go:build !race

package sqlparse

// raceEnabled is set in builds with the race detector.
const raceEnabled = false
