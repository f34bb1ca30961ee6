// Command collector moves graygate's events from NATS JetStream into
// Postgres and serves the failed-payload sample store: `collector serve`,
// `collector migrate`, `collector samples list|show` (SPEC §8).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/graygate/graygate/collector/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(1)
	}
}
