package relay

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// watcher's or a keeper's) is still running at the end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
