//go:build !linux

package sim

import "time"

var start = time.Now()

// threadCPU and processCPU fall back to wall time where the thread's CPU
// time is not available.
func threadCPU() time.Duration  { return time.Since(start) }
func processCPU() time.Duration { return time.Since(start) }
