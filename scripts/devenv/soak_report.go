package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/counts"
)

// soakReport is what `devenv soak` prints and writes: the client's view of
// each phase, what the pipeline stored, and the rollbacks.
type soakReport struct {
	Options           string        `json:"options"`
	Started           time.Time     `json:"started"`
	Phases            []phaseReport `json:"phases"`
	Behind            int64         `json:"behind"` // requests the load generator could not send on time
	SettleSeconds     float64       `json:"settle_seconds"`
	Events            eventsReport  `json:"events"`
	RollbacksExpected int           `json:"rollbacks_expected"`
	RollbacksSeen     int           `json:"rollbacks_seen"`
	// RollbackMillis: gray arm broken → every gateway replica at 0 %; -1
	// when that did not happen within the phase.
	RollbackMillis float64 `json:"rollback_ms"`
}

type phaseReport struct {
	Name            string         `json:"name"`
	What            string         `json:"what"`
	Start           time.Time      `json:"start"`
	Seconds         float64        `json:"seconds"`
	FaultAt         string         `json:"fault_at,omitempty"`
	RestoredAt      string         `json:"restored_at,omitempty"`
	Requests        int            `json:"requests"`
	Statuses        map[string]int `json:"statuses"`
	Arms            map[string]int `json:"arms"`
	ClientErrors    int            `json:"client_errors"`
	ErrorExamples   []string       `json:"error_examples,omitempty"`
	Rerouted        int            `json:"rerouted"`
	P50Millis       float64        `json:"p50_ms"`
	P99Millis       float64        `json:"p99_ms"`
	MaxMillis       float64        `json:"max_ms"`
	Rollbacks       int            `json:"rollbacks"`
	RollbackReasons []string       `json:"rollback_reasons,omitempty"`
}

type eventsReport struct {
	Expected        stored   `json:"expected"`
	Stored          stored   `json:"stored"`
	Missing         int      `json:"missing"`
	MissingExamples []string `json:"missing_examples,omitempty"`
}

func (o soakOptions) summary() string {
	return fmt.Sprintf("--phase %s --outage %s --rate %d --conns %d --users %d --nats-nodes %d", o.phase, o.outage, o.rate, o.conns, o.users, o.natsNodes)
}

// fill copies a phase's client figures into the report.
func (p *phaseReport) fill(st *phaseStats) {
	p.Requests = st.requests()
	p.Statuses = map[string]int{}
	for code, n := range st.statuses {
		p.Statuses[strconv.Itoa(code)] = n
	}
	p.Arms = st.arms
	p.ClientErrors, p.ErrorExamples, p.Rerouted = st.errors, st.examples, st.rerouted
	lat := slices.Clone(st.latencies)
	slices.Sort(lat)
	p.P50Millis, p.P99Millis = quantile(lat, 0.50), quantile(lat, 0.99)
	if len(lat) > 0 {
		p.MaxMillis = lat[len(lat)-1]
	}
}

// quantile of sorted values (nearest rank); 0 when there are none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// failed lists the targets the drill missed.
func (r *soakReport) failed() []string {
	var out []string
	errs := 0
	for _, p := range r.Phases {
		errs += p.ClientErrors
		if p.Name != "rollback" && p.Rollbacks > 0 {
			out = append(out, fmt.Sprintf("phase %s: %d rollback(s) of a healthy gray arm", p.Name, p.Rollbacks))
		}
	}
	if errs > 0 {
		out = append(out, fmt.Sprintf("%d client-visible errors (target 0)", errs))
	}
	if r.Events.Missing > 0 {
		out = append(out, fmt.Sprintf("%d answered requests have no stored event (target 0)", r.Events.Missing))
	}
	e := r.Events
	if e.Stored.Requests != e.Expected.Requests || e.Stored.Rejections != e.Expected.Rejections || e.Stored.Samples != e.Expected.Samples {
		out = append(out, fmt.Sprintf("events sent vs stored differ: requests %d/%d, rejections %d/%d, samples %d/%d",
			e.Expected.Requests, e.Stored.Requests, e.Expected.Rejections, e.Stored.Rejections, e.Expected.Samples, e.Stored.Samples))
	}
	if e.Stored.Duplicates > 0 {
		out = append(out, fmt.Sprintf("%d duplicated rows (target 0)", e.Stored.Duplicates))
	}
	if r.RollbacksSeen != r.RollbacksExpected {
		out = append(out, fmt.Sprintf("rollbacks: expected %d, seen %d", r.RollbacksExpected, r.RollbacksSeen))
	}
	if r.RollbacksExpected > 0 && r.RollbackMillis < 0 {
		out = append(out, "the broken gray arm was not at 0 % on every gateway by the end of its phase")
	}
	return out
}

// markdown renders the report for a person (and for an issue note).
func (r *soakReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## graygate soak report\n\n%s, started %s\n\n", r.Options, r.Started.Format(time.RFC3339))
	b.WriteString("| phase | fault | requests | statuses | arms | client errors | rerouted | p50 ms | p99 ms | max ms | rollbacks |\n")
	b.WriteString("| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range r.Phases {
		fault := p.What
		if p.FaultAt != "" {
			fault += " (at " + p.FaultAt
			if p.RestoredAt != "" {
				fault += ", back at " + p.RestoredAt
			}
			fault += ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d | %d | %.1f | %.1f | %.1f | %d |\n",
			p.Name, fault, p.Requests, counts.Format(p.Statuses), counts.Format(p.Arms), p.ClientErrors,
			p.Rerouted, p.P50Millis, p.P99Millis, p.MaxMillis, p.Rollbacks)
	}
	e := r.Events
	fmt.Fprintf(&b, "\nEvents (answered by a gateway → stored in Postgres, after %.1f s to settle):\n\n", r.SettleSeconds)
	b.WriteString("| kind | sent | stored |\n| --- | ---: | ---: |\n")
	fmt.Fprintf(&b, "| request.completed (proxied answers) | %d | %d |\n", e.Expected.Requests, e.Stored.Requests)
	fmt.Fprintf(&b, "| request.rejected (400 contract) | %d | %d |\n", e.Expected.Rejections, e.Stored.Rejections)
	fmt.Fprintf(&b, "| sample.malformed (fallback answers) | %d | %d |\n", e.Expected.Samples, e.Stored.Samples)
	fmt.Fprintf(&b, "\n- answered requests without a stored event: %d", e.Missing)
	if len(e.MissingExamples) > 0 {
		fmt.Fprintf(&b, " (e.g. %s)", strings.Join(e.MissingExamples, ", "))
	}
	fmt.Fprintf(&b, "\n- duplicated rows: %d\n", e.Stored.Duplicates)
	fmt.Fprintf(&b, "- rollbacks: expected %d, seen %d", r.RollbacksExpected, r.RollbacksSeen)
	if r.RollbackMillis >= 0 {
		fmt.Fprintf(&b, "; gray broken → every gateway at 0 %%: %.0f ms", r.RollbackMillis)
	}
	fmt.Fprintf(&b, "\n- requests the load generator could not send on time: %d\n", r.Behind)
	var examples []string
	for _, p := range r.Phases {
		for _, x := range p.ErrorExamples {
			examples = append(examples, p.Name+": "+x)
		}
	}
	if len(examples) > 0 {
		b.WriteString("\nClient errors (first of each phase):\n\n")
		for _, x := range examples {
			fmt.Fprintf(&b, "- %s\n", x)
		}
	}
	if failed := r.failed(); len(failed) > 0 {
		b.WriteString("\n**Targets missed:**\n\n")
		for _, f := range failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	} else {
		b.WriteString("\nEvery target met: 0 client errors, events sent = stored, 0 duplicates, rollbacks as expected.\n")
	}
	return b.String()
}

// write saves the Markdown report at path and the JSON beside it.
func (r *soakReport) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(strings.TrimSuffix(path, filepath.Ext(path))+".json", append(j, '\n'), 0o644)
}
