// Package command runs a script's main: its run function under a context
// that SIGINT and SIGTERM cancel, its error on stderr and exit status 1.
package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main calls run with the command-line arguments and exits 1 when it fails,
// printing the error after name.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
