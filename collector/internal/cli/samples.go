package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// listFlags are the flags of `samples list`.
type listFlags struct {
	deployment, reason, arm, since, until string
	limit                                 int
	json                                  bool
}

func (f *listFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.deployment, "deployment", "", "only this deployment")
	fs.StringVar(&f.reason, "reason", "", "only this reason")
	fs.StringVar(&f.arm, "arm", "", "only this arm (gray or shadow)")
	fs.StringVar(&f.since, "since", "", "duration before now or RFC 3339 time")
	fs.StringVar(&f.until, "until", "", "duration before now or RFC 3339 time (exclusive)")
	fs.IntVar(&f.limit, "limit", 50, "most samples to print")
	fs.BoolVar(&f.json, "json", false, "JSON output")
}

// filter checks the flags and turns them into a store filter.
func (f *listFlags) filter(now time.Time) (store.SampleFilter, error) {
	sf := store.SampleFilter{Deployment: f.deployment, Reason: f.reason, Arm: f.arm, Limit: f.limit}
	if f.reason != "" && !events.SampleReason(f.reason).Valid() {
		return sf, fmt.Errorf("--reason %q: want schema_violation, invalid_json, timeout, upstream_error or upstream_status", f.reason)
	}
	if f.arm != "" && f.arm != string(events.ArmGray) && f.arm != string(events.ArmShadow) {
		return sf, fmt.Errorf("--arm %q: want gray or shadow", f.arm)
	}
	if err := checkLimit(f.limit); err != nil {
		return sf, err
	}
	var err error
	if sf.Since, err = parseWhen("--since", f.since, now); err != nil {
		return sf, err
	}
	if sf.Until, err = parseWhen("--until", f.until, now); err != nil {
		return sf, err
	}
	return sf, nil
}

// parseWhen reads a duration before now or an RFC 3339 time; "" is zero.
func parseWhen(flagName, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want a duration before now (1h, 90m) or an RFC 3339 time", flagName, v)
}

// query runs read against the sample store named by the configuration,
// within the 30 seconds a command waits for Postgres, and closes the store.
func query[T any](ctx context.Context, cfg *config.Config, read func(context.Context, *store.Reader) (T, error)) (T, error) {
	pool, err := store.NewPool(cfg.Postgres.URL.Reveal(), 1)
	if err != nil {
		var zero T
		return zero, err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return read(ctx, store.NewReader(pool))
}

// checkLimit checks a --limit flag against the store's page size.
func checkLimit(limit int) error {
	if limit < 1 || limit > store.MaxPage {
		return fmt.Errorf("--limit %d: want 1 to %d", limit, store.MaxPage)
	}
	return nil
}

// listAnswer is the JSON of `samples list --json`, the API's list shape.
type listAnswer struct {
	Object     string                `json:"object"`
	Data       []store.SampleSummary `json:"data"`
	NextCursor *string               `json:"next_cursor"`
	HasMore    bool                  `json:"has_more"`
}

func list(ctx context.Context, cfg *config.Config, f listFlags, out io.Writer) error {
	sf, err := f.filter(time.Now())
	if err != nil {
		return err
	}
	page, err := query(ctx, cfg, func(ctx context.Context, r *store.Reader) (store.SamplePage, error) {
		return r.ListSamples(ctx, sf)
	})
	if err != nil {
		return err
	}
	if f.json {
		a := listAnswer{Object: "list", Data: page.Samples}
		if page.NextCursor != "" {
			a.NextCursor, a.HasMore = &page.NextCursor, true
		}
		return writeJSON(out, a)
	}
	return writeTable(out, page)
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// firstErrorWidth is where the table cuts a long first error.
const firstErrorWidth = 60

// writeTable prints samples as an aligned table, newest first.
func writeTable(out io.Writer, page store.SamplePage) error {
	if len(page.Samples) == 0 {
		_, err := fmt.Fprintln(out, "no samples match")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDEPLOYMENT\tARM\tREASON\tFIRST ERROR\tSIZE\tREQUEST ID\tEVENT ID")
	for _, s := range page.Samples {
		first := "-"
		if s.FirstError != nil {
			first = s.FirstError.Description
			if s.FirstError.Field != "" && s.FirstError.Field != "(root)" {
				first = s.FirstError.Field + ": " + first
			}
			if s.ErrorCount > 1 {
				first += fmt.Sprintf(" (+%d)", s.ErrorCount-1)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			s.OccurredAt.UTC().Format("2006-01-02 15:04:05"), cell(s.Deployment, 40), cell(s.Arm, 40), cell(s.Reason, 40),
			cell(first, firstErrorWidth), size(s.PayloadBytes, s.PayloadTruncated), cell(s.RequestID, 40), cell(s.EventID, 40))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(out, "(more samples match: raise --limit or narrow --since/--until)\n")
	}
	return nil
}

// cell makes text safe and short for one table cell: control and
// bidirectional characters escaped, cut at width runes.
func cell(s string, width int) string {
	return text.Cell(strings.Join(strings.Fields(safe(s)), " "), width)
}

// safe escapes what a terminal would interpret: C0 and C1 control
// characters (newlines and tabs too), bidirectional formatting characters
// and bytes that are not UTF-8 (text.Escape, the rule every table shares).
func safe(s string) string { return text.Escape(s) }

// escape is safe, keeping newlines and tabs when keepLines is set.
func escape(s string, keepLines bool) string {
	if keepLines {
		return text.EscapeLines(s)
	}
	return text.Escape(s)
}

// size prints a payload size; "(cut)" when the stored payload is truncated.
func size(n int64, cut bool) string {
	var s string
	switch {
	case n < 1024:
		s = fmt.Sprintf("%d B", n)
	case n < 1<<20:
		s = fmt.Sprintf("%.1f KiB", float64(n)/1024)
	default:
		s = fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	if cut {
		s += " (cut)"
	}
	return s
}

// sampleAnswer is the JSON of `samples show --json`, the API's shape.
type sampleAnswer struct {
	Object string `json:"object"`
	store.Sample
}

// show prints one sample. id is an event id, or a request id with exactly
// one sample.
func show(ctx context.Context, cfg *config.Config, id string, asJSON bool, out io.Writer) error {
	s, err := query(ctx, cfg, func(ctx context.Context, r *store.Reader) (store.Sample, error) {
		eventID, err := uuid.Parse(id)
		if err != nil || len(id) != 36 {
			matches, err := r.SamplesByRequest(ctx, id)
			if err != nil {
				return store.Sample{}, err
			}
			switch len(matches) {
			case 0:
				return store.Sample{}, fmt.Errorf("no sample has event id or request id %q", safe(id))
			case 1:
				eventID = uuid.MustParse(matches[0].EventID)
			default:
				writeTable(out, store.SamplePage{Samples: matches})
				return store.Sample{}, fmt.Errorf("request %q has %d samples; show one by its event id", safe(id), len(matches))
			}
		}
		s, err := r.Sample(ctx, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return s, fmt.Errorf("no sample has event id %s", eventID)
		}
		return s, err
	})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, sampleAnswer{Object: "sample", Sample: s})
	}
	return writeSample(out, s)
}

// writeSample prints a sample for a person: its fields, its errors, then
// its payload (text with terminal controls escaped, or base64).
func writeSample(out io.Writer, s store.Sample) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("event id", safe(s.EventID))
	row("time", s.OccurredAt.UTC().Format(time.RFC3339Nano))
	row("deployment", safe(s.Deployment))
	row("arm", safe(s.Arm))
	row("upstream model", safe(s.UpstreamModel))
	row("reason", safe(s.Reason))
	if s.Outcome != "" {
		row("outcome", safe(s.Outcome))
	}
	status := fmt.Sprint(s.Status)
	if s.Status == 0 {
		status = "none (no response)"
	}
	row("status", status)
	row("request id", safe(s.RequestID))
	row("prompt hash", safe(s.PromptHash))
	if s.ArmPromptVersion != "" || s.ArmPromptHash != "" {
		row("arm prompt", safe(s.ArmPromptVersion)+" "+safe(s.ArmPromptHash))
	}
	row("latency", fmt.Sprintf("%g ms", s.LatencyMillis))
	row("source", safe(s.Source))
	payload := fmt.Sprintf("%d bytes", s.StoredBytes)
	if s.PayloadTruncated {
		payload += fmt.Sprintf(" (cut from %d)", s.PayloadBytes)
	}
	row("payload", payload)
	if err := tw.Flush(); err != nil {
		return err
	}
	writeAnswer(out, "", s.ValidationErrors, s.Raw, s.PayloadBase64, s.Payload)
	if s.Outcome == string(events.OutcomeSchemaViolationBoth) {
		writePrimary(out, s)
	}
	return nil
}

// writePrimary prints primary's answer to the same request of a
// schema_violation_both sample: why it broke the contract (or that it was
// cut), then the answer as the payload is printed.
func writePrimary(out io.Writer, s store.Sample) {
	size := fmt.Sprintf("%d bytes", len(s.PrimaryRaw))
	if s.PrimaryPayloadTruncated {
		size += fmt.Sprintf(" (cut from %d)", s.PrimaryPayloadBytes)
	}
	fmt.Fprintf(out, "\nprimary's answer to the same request broke the contract too (%s)\n", size)
	writeAnswer(out, "primary ", s.PrimaryValidationErrors, s.PrimaryRaw, s.PrimaryPayloadBase64, s.PrimaryPayload)
}

// writeAnswer prints an answer's validation errors and its payload, as
// text (terminal controls escaped) or, when it is not UTF-8, as base64 in
// 76-column lines; prefix names whose answer it is ("" for gray's).
func writeAnswer(out io.Writer, prefix string, errs []events.ValidationError, raw []byte, b64, text string) {
	fmt.Fprintf(out, "\n%serrors (%d):\n", prefix, len(errs))
	for _, e := range errs {
		fmt.Fprintf(out, "  %s: %s\n", safe(e.Field), safe(e.Description))
	}
	switch {
	case len(raw) == 0:
		fmt.Fprintf(out, "\n%spayload: empty\n", prefix)
	case b64 != "":
		fmt.Fprintf(out, "\n%spayload (not UTF-8, base64):\n", prefix)
		for b := b64; b != ""; {
			n := min(76, len(b))
			fmt.Fprintln(out, b[:n])
			b = b[n:]
		}
	default:
		t := escape(text, true)
		if !strings.HasSuffix(t, "\n") {
			t += "\n"
		}
		fmt.Fprintf(out, "\n%spayload:\n%s", prefix, t)
	}
}
