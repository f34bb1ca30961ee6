//go:build !race

package proxy

// raceEnabled: the race detector runs (race_on_test.go).
const raceEnabled = false
