package main

import (
	"fmt"
	"os"
	"time"

	"github.com/graygate/graygate/scripts/internal/process"
)

// proc is a child process the drill owns (starts, stops with SIGSTOP,
// continues, kills and restarts).
type proc = process.Child

// logf prints a progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s drill: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
