package process

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Start starts cmd with its stdout and stderr appended to the file at
// logPath, after a line "--- TIME TAG: start BIN ARGS" that marks where this
// run's output begins. cmd runs in its own process group, so that a signal
// to the group reaches it and nothing else, unless the caller set
// cmd.SysProcAttr. Start does not wait: the channel it returns is closed once
// the process has exited and been reaped, and whoever holds it owns cmd.
func Start(cmd *exec.Cmd, logPath, tag string) (<-chan struct{}, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "--- %s %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), tag, cmd.Args[0], strings.Join(cmd.Args[1:], " "))
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return done, nil
}
