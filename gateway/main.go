// Command gateway is graygate's OpenAI-compatible gateway: `gateway serve`
// proxies traffic, `gateway validate` checks a configuration file, `gateway rollout`
// lists and changes rollouts through the admin API.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/graygate/graygate/gateway/internal/cli"
)

func main() {
	if err := cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		if exit, ok := errors.AsType[*cli.ExitError](err); ok {
			os.Exit(exit.Code)
		}
		os.Exit(1)
	}
}
