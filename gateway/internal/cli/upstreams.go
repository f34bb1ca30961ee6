package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// upstreamsCommand is `gateway upstreams [--json]`: GET /admin/upstreams
// as a table, one row per replica (SPEC §3 rev. 4).
func upstreamsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f rolloutFlags
	fset := flag.NewFlagSet("gateway upstreams", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&f.adminURL, "admin-url", "", "admin API URL (default: from gateway.admin_listen of --config)")
	fset.StringVar(&f.config, "config", "graygate.yaml", "configuration file")
	fset.BoolVar(&f.json, "json", false, "print the answer as JSON")
	fset.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitf(ExitUsage, "upstreams: %v", err)
	}
	if fset.NArg() > 0 {
		return exitf(ExitUsage, "upstreams takes no arguments, got %q", fset.Arg(0))
	}
	fset.Visit(func(fl *flag.Flag) { f.configSet = f.configSet || fl.Name == "config" })
	base, err := adminURL(&f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var out struct {
		Upstreams []struct {
			Deployment string `json:"deployment"`
			events.ArmReplicas
			IndexEntries *int `json:"index_entries"`
		} `json:"upstreams"`
	}
	raw, err := adminCall(ctx, http.MethodGet, base+"/admin/upstreams", os.Getenv("GRAYGATE_ADMIN_TOKEN"), nil, &out)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(stdout, raw)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPLOYMENT\tARM\tBALANCE\tREPLICA\tSTATE\tIN FLIGHT\tWAITING\tREQUESTS\tFAILURES\tENGINE RUN/WAIT/KV\tLAST ERROR")
	for _, u := range out.Upstreams {
		for _, r := range u.Replicas {
			eng := "-"
			if e := r.Engine; e != nil {
				eng = fmt.Sprintf("%g/%g/%.0f%%", e.Running, e.Waiting, 100*e.KVCacheUsage)
			}
			name := r.Replica
			if name == "" {
				name = "(url)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", text.Escape(u.Deployment), text.Escape(string(u.Arm)),
				text.Escape(string(u.Balance)), text.Escape(name), text.Escape(string(r.State)), r.InFlight, r.Waiting, r.Requests,
				r.Failures, eng, text.OrDash(oneLine(r.LastError)))
		}
		if u.IndexEntries != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t(prefix index: %d entries)\t\t\t\t\t\t\t\n", text.Escape(u.Deployment),
				text.Escape(string(u.Arm)), text.Escape(string(u.Balance)), *u.IndexEntries)
		}
	}
	return tw.Flush()
}
