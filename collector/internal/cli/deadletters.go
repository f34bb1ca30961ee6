package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/config"
)

// deadLettersList prints the newest dead letters: messages Postgres
// refused, kept in dead_letters (SPEC §8).
func deadLettersList(ctx context.Context, cfg *config.Config, limit int, asJSON bool, out io.Writer) error {
	if err := checkLimit(limit); err != nil {
		return err
	}
	list, err := query(ctx, cfg, func(ctx context.Context, r *store.Reader) ([]store.DeadLetter, error) {
		return r.DeadLetters(ctx, limit, 0)
	})
	if err != nil {
		return err
	}
	if asJSON {
		if list == nil {
			list = []store.DeadLetter{}
		}
		return writeJSON(out, struct {
			Object string             `json:"object"`
			Data   []store.DeadLetter `json:"data"`
		}{"list", list})
	}
	return writeDeadLetters(out, list)
}

// writeDeadLetters prints dead letters as a table, every text cell
// escaped (cell).
func writeDeadLetters(out io.Writer, list []store.DeadLetter) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(out, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tSTREAM\tSEQ\tSUBJECT\tEVENT ID\tERROR")
	for _, d := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.ReceivedAt.Format("2006-01-02 15:04:05"), cell(d.Stream, 40),
			d.Sequence, cell(d.Subject, 50), cell(d.EventID, 40), cell(d.Error, firstErrorWidth))
	}
	return tw.Flush()
}

// deadLetterShow prints one dead letter. raw writes the message body alone,
// byte for byte, to fix and republish it.
func deadLetterShow(ctx context.Context, cfg *config.Config, arg string, asJSON, raw bool, out io.Writer) error {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id < 1 {
		return fmt.Errorf("dead letter id %q: want the number in the ID column of deadletters list", safe(arg))
	}
	d, err := query(ctx, cfg, func(ctx context.Context, r *store.Reader) (store.DeadLetter, error) {
		return r.DeadLetter(ctx, id)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no dead letter has id %d", id)
	}
	if err != nil {
		return err
	}
	switch {
	case raw:
		_, err := out.Write(d.Message)
		return err
	case asJSON:
		return writeJSON(out, struct {
			Object string `json:"object"`
			store.DeadLetter
		}{"dead_letter", d})
	}
	return writeDeadLetter(out, d)
}

// writeDeadLetter prints one dead letter's fields, every text escaped,
// then its message with terminal controls escaped.
func writeDeadLetter(out io.Writer, d store.DeadLetter) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", strconv.FormatInt(d.ID, 10))
	row("received", d.ReceivedAt.Format(time.RFC3339Nano))
	row("event id", safe(d.EventID))
	row("type", safe(d.EventType))
	row("stream", fmt.Sprintf("%s (sequence %d)", safe(d.Stream), d.Sequence))
	row("subject", safe(d.Subject))
	row("error", safe(d.Error))
	row("message", fmt.Sprintf("%d bytes", len(d.Message)))
	if err := tw.Flush(); err != nil {
		return err
	}
	text := string(d.Message)
	if !utf8.ValidString(text) {
		text = string([]rune(text)) // invalid bytes shown as U+FFFD, escaped below
	}
	_, err := fmt.Fprintf(out, "\nmessage (terminal controls escaped; --raw prints the bytes):\n%s\n", escape(text, true))
	return err
}
