package serve

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// shadow copy's, a keeper's or a watcher's) is still running at the end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
