package testenv

import (
	"os/exec"
	"testing"
)

// Chromium returns the path of a Chromium or Chrome binary for browser
// tests. Without one the test is skipped, or fails when CI is set (.ci/run
// installs Debian's chromium first).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	unavailable(t, "no chromium on PATH: install it (apt-get install chromium) to run the browser tests")
	return ""
}
