//go:build !race

package publish

// raceEnabled: the race detector runs (race_on_test.go).
const raceEnabled = false
