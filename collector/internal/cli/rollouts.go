package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// rolloutHistory prints a deployment's rollout events, newest first, with
// the operator of each admin change, what it did to the hold, and the gate
// behind each analyzer rollback: its estimate, the bound that decided and
// the threshold.
func rolloutHistory(ctx context.Context, cfg *config.Config, deployment string, limit int, asJSON bool, out io.Writer) error {
	if err := checkLimit(limit); err != nil {
		return err
	}
	page, err := query(ctx, cfg, func(ctx context.Context, r *store.Reader) (store.RolloutPage, error) {
		return r.RolloutHistory(ctx, deployment, limit, "")
	})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, struct {
			Object string               `json:"object"`
			Data   []store.RolloutEvent `json:"data"`
		}{"list", page.Events})
	}
	return writeRollouts(out, deployment, page.Events)
}

// writeRollouts prints a deployment's rollout events as a table, every
// text cell escaped (cell).
func writeRollouts(out io.Writer, deployment string, evs []store.RolloutEvent) error {
	if len(evs) == 0 {
		_, err := fmt.Fprintf(out, "no rollout events for %s\n", safe(deployment))
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tREVISION\tSTATUS\tPERCENT\tACTOR\tOPERATOR\tHOLD\tTRIGGER\tREASON")
	for _, e := range evs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%g\t%s\t%s\t%s\t%s\t%s\n", e.OccurredAt.Format("2006-01-02 15:04:05"), e.StreamSequence,
			cell(e.Status, 40), e.Percentage, cell(e.Actor, 40), text.OrDash(cell(e.Operator, 32)), hold(e.Hold), cell(trigger(e.Trigger), 120),
			cell(e.Reason, firstErrorWidth))
	}
	return tw.Flush()
}

// hold prints what an event did to the hold (SPEC §3 rev. 4): "held",
// "released", or "-" when it did not speak of it.
func hold(h *bool) string {
	switch {
	case h == nil:
		return "-"
	case *h:
		return "held"
	}
	return "released"
}

// trigger prints a rollback's gate: "ttft_p99[stream] 2.5 (bound 2.1 > 2) over 600s".
func trigger(t *events.GateTrigger) string {
	if t == nil {
		return "-"
	}
	gate := string(t.Gate)
	if t.Stream != nil {
		if *t.Stream {
			gate += "[stream]"
		} else {
			gate += "[non-stream]"
		}
	}
	return fmt.Sprintf("%s %.4g (bound %.4g, threshold %.4g) over %gs", gate, t.Estimate, t.Bound, t.Threshold, t.WindowSeconds)
}
