// Package process holds what the scripts need of the processes they start and
// measure: their environment, readiness checks, a free port, the fields of
// /proc/PID/stat, and a buffer and the tail of a file for their output.
package process

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
)

// StatFields returns the fields of /proc/PID/stat after the command name
// (index 0 is field 3 in proc(5), the state).
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// Buffer is a bytes.Buffer safe for one writer goroutine (a process, a
// server's logger) and a reader at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *Buffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}
