// Command analyzer evaluates the four hard metrics of every gray release
// (SPEC §9) from the event log and rolls a failing gray back: `analyzer
// serve` runs the evaluation loop, `analyzer status` prints the live gate
// values of a running analyzer.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/graygate/graygate/analyzer/internal/cli"
)

func main() {
	if err := cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "analyzer:", err)
		os.Exit(1)
	}
}
