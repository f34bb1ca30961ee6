// Command gateway is graygate's OpenAI-compatible gateway: `gateway serve`
// proxies traffic, `gateway validate` checks a configuration file.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/graygate/graygate/gateway/internal/cli"
)

func main() {
	if err := cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
