// Command drill is graygate's cluster fault drill (`task drill`, SPEC §11
// and §12 rev. 4 "cluster"). It brings up, on loopback only, a three-node
// JetStream cluster on the shipped infra/nats configuration and
// certificates (streams at three replicas), two analyzers, two gateways,
// the collector and mock upstreams, sends bounded traffic through the
// gateways, and injects one fault after another: SIGSTOP and SIGCONT of
// each node, SIGKILL and restart of each node, the lease holder stopped
// and resumed, a partition of one node (route proxies the drill runs),
// and quorum loss. During each fault the gray upstream starts failing, and
// the drill measures what reached the client, what was stored, the lease
// and the rollback. It prints a row per fault, writes the table to
// docs/drill.md, and stops every process it started when it ends, fails
// or is interrupted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/graygate/graygate/scripts/internal/command"
	"github.com/graygate/graygate/scripts/internal/repo"
)

func main() { command.Main("drill", run) }

// options are the drill's flags.
type options struct {
	outage     time.Duration // how long each fault lasts
	longOutage time.Duration // how long quorum loss lasts
	breakAfter time.Duration // when, after the fault, the gray starts failing
	steady     time.Duration // healthy traffic before each fault
	settle     time.Duration // at least this long after the heal
	limit      time.Duration // at most this long after the heal, waiting for the rollback
	rate       int
	conns      int
	users      int
	bin        string
	dir        string
	doc        string
	database   string // the drill's own database on DATABASE_URL's server
	json       bool
	faults     []string
}

func parseFlags(args []string) (options, error) {
	var o options
	var faults string
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.DurationVar(&o.outage, "outage", 20*time.Second, "how long each fault lasts (2 × the analyzers' 10 s lease TTL)")
	fs.DurationVar(&o.longOutage, "long-outage", 45*time.Second, "how long quorum loss lasts: longer than 2 × the lease TTL, so the vacancy must be reported")
	fs.DurationVar(&o.breakAfter, "break-after", 4*time.Second, "when, after a fault begins, the gray upstream starts failing its schema")
	fs.DurationVar(&o.steady, "steady", 3*time.Second, "healthy traffic at 20 % gray before each fault")
	fs.DurationVar(&o.settle, "settle", 8*time.Second, "how long a phase goes on after the heal, at least")
	fs.DurationVar(&o.limit, "limit", 60*time.Second, "how long a phase waits after the heal for the rollback on every gateway, at most")
	fs.IntVar(&o.rate, "rate", 40, "requests per second sent to the gateways (loopback)")
	fs.IntVar(&o.conns, "conns", 8, "client connections sending them")
	fs.IntVar(&o.users, "users", 200, "distinct users (sticky gray assignment)")
	fs.StringVar(&o.bin, "bin", "bin", "directory with the built gateway, collector, analyzer and mockllm (task build)")
	fs.StringVar(&o.dir, "dir", ".data/drill", "the drill's files: NATS stores, certificates, configurations, logs (emptied at start)")
	fs.StringVar(&o.doc, "doc", "docs/drill.md", "where to write the table (empty: nowhere)")
	fs.StringVar(&o.database, "database", drillDB, "the drill's own database on DATABASE_URL's server (dropped and created at start)")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON on stdout instead of the table")
	fs.StringVar(&faults, "faults", "", "comma-separated faults to run, in the drill's order (default: all)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if faults != "" {
		o.faults = strings.Split(faults, ",")
	}
	switch {
	case o.breakAfter >= min(o.outage, o.longOutage):
		return o, fmt.Errorf("--break-after %s must be shorter than --outage %s: the gray breaks while the fault lasts", o.breakAfter, o.outage)
	case o.rate < 1 || o.conns < 1 || o.users < 1:
		return o, errors.New("--rate, --conns and --users must be at least 1")
	case o.limit < o.settle:
		return o, fmt.Errorf("--limit %s must be at least --settle %s", o.limit, o.settle)
	}
	return o, nil
}

// result is the drill's output, also written as JSON with --json.
type result struct {
	Date    string   `json:"date"`
	Commit  string   `json:"commit"`
	Command string   `json:"command"`
	Phases  []phase  `json:"phases"`
	Rows    []row    `json:"rows"`
	Totals  totals   `json:"totals"`
	Notes   []string `json:"notes"`
}

// totals are the run's figures beyond the rows.
type totals struct {
	Requests            int     `json:"requests"`
	Behind              int64   `json:"ticks_dropped"` // the load fell behind its rate
	StreamMessages      uint64  `json:"graygate_events_messages"`
	StoredEventIDs      int     `json:"stored_event_ids"`
	StoreSettledSeconds float64 `json:"store_settled_s"`
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	for _, p := range []*string{&o.bin, &o.dir, &o.doc} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
	started := time.Now()
	commit := commitOf(root) // what runs: the tree as it is now, not at the end
	s, err := startSystem(ctx, root, o)
	if s != nil {
		defer func() {
			logf("stopping every process the drill started")
			s.shutdown()
		}()
	}
	if err != nil {
		return err
	}
	res, err := s.drill(ctx)
	if err != nil {
		return err
	}
	res.Command = "task drill" + argsText(args)
	res.Commit = commit
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Print("\n" + markdown(res.Rows) + "\n" + strings.Join(res.Notes, "\n") + "\n")
	}
	if o.doc != "" {
		if err := os.WriteFile(o.doc, []byte(document(res)), 0o644); err != nil {
			return err
		}
		logf("table written to %s", rel(root, o.doc))
	}
	logf("done in %s", time.Since(started).Round(time.Second))
	return nil
}

func argsText(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " -- " + strings.Join(args, " ")
}

// drill runs the faults under traffic, waits for the pipeline to store
// what was sent and computes the table.
func (s *system) drill(ctx context.Context) (*result, error) {
	o := s.o
	lw := newLeaseWatch(s.analyzers)
	rw := newRolloutWatch(s.gateways)
	faults, err := selectFaults(s.faults(lw), o.faults)
	if err != nil {
		return nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	done := make(chan struct{}, 2)
	go func() { lw.run(watchCtx, 200*time.Millisecond); done <- struct{}{} }()
	go func() { rw.run(watchCtx, 10*time.Millisecond, 200*time.Millisecond); done <- struct{}{} }()
	defer func() { stopWatch(); <-done; <-done }()

	logf("waiting for an analyzer to hold the lease")
	for end := time.Now().Add(time.Minute); lw.holder() < 0; sleep(ctx, 200*time.Millisecond) {
		if time.Now().After(end) || ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), errors.New("no analyzer took the lease within a minute"))
		}
	}

	logf("waiting for every gateway to read the rollout log")
	for end := time.Now().Add(time.Minute); ; sleep(ctx, 200*time.Millisecond) {
		es, known := rw.current(), true
		for _, e := range es {
			known = known && e.Known
		}
		if known && len(es) == len(s.gateways) {
			break
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), fmt.Errorf("a gateway has not read the rollout log within a minute: %+v", es))
		}
	}

	l := newLoad(s.gateways, o.conns)
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { l.run(loadCtx, o.rate, o.conns, o.users); close(loadDone) }()
	defer func() { stopLoad(); <-loadDone }()
	var total time.Duration
	for _, f := range faults {
		total += o.steady + o.settle + 5*time.Second + o.outage
		if f.outage > 0 {
			total += f.outage - o.outage
		}
	}
	logf("%d faults at %d requests/s over %d connections, each lasting %s, quorum loss %s (about %s)",
		len(faults), o.rate, o.conns, o.outage, o.longOutage, total.Round(10*time.Second))

	var phases []phase
	for i, f := range faults {
		p, err := s.runPhase(ctx, i, f, l, rw, lw)
		if err != nil {
			return nil, fmt.Errorf("phase %s: %w", f.name, err)
		}
		phases = append(phases, p)
	}
	stopLoad()
	<-loadDone

	reqs := l.requests()
	answered := 0
	for _, r := range reqs {
		if r.status != 0 {
			answered++
		}
	}
	logf("traffic stopped; waiting for the collector to store the events of %d answered requests", answered)
	start, progress := time.Now(), time.Now()
	var rows map[string]int
	var ids, last int
	for {
		var err error
		rows, ids, err = storedRows(ctx, s.db)
		if err != nil {
			logf("  count rows: %v", err)
		}
		have := 0
		for _, r := range reqs {
			if r.status != 0 && rows[r.id] > 0 {
				have++
			}
		}
		if have >= answered {
			break
		}
		if have != last {
			last, progress = have, time.Now()
			logf("  stored %d/%d", have, answered)
		}
		// The collector's AckWait is a minute: a delivery lost with a node
		// comes again after it.
		if time.Since(progress) > 75*time.Second || time.Since(start) > 3*time.Minute {
			logf("  gave up waiting after %s: %d/%d stored", time.Since(start).Round(time.Second), have, answered)
			break
		}
		sleep(ctx, time.Second)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	nc, js, err := s.dialAsGateway()
	if err != nil {
		return nil, fmt.Errorf("read the streams: %w", err)
	}
	defer nc.Close()
	rollouts, err := readRollouts(ctx, js)
	if err != nil {
		return nil, err
	}
	msgs, err := streamMessages(ctx, js)
	if err != nil {
		return nil, err
	}
	res := &result{
		Date:   time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Phases: phases,
		Rows: table(inputs{phases: phases, reqs: reqs, rows: rows, samples: lw.between, rollouts: rollouts,
			views: rw.allViews(), gateways: len(s.gateways)}),
		Totals: totals{Requests: len(reqs), Behind: l.pace.Behind(), StreamMessages: msgs, StoredEventIDs: ids,
			StoreSettledSeconds: time.Since(start).Seconds()},
	}
	res.Notes = notes(res, rollouts, s.certs.own)
	return res, nil
}

// notes are the lines under the table: what the run's totals say and
// why a column reads n/a.
func notes(res *result, rollouts []rolloutEvent, ownCerts bool) []string {
	var out []string
	t := res.Totals
	out = append(out, fmt.Sprintf("- %d requests sent (%d ticks dropped because every connection was busy); GRAYGATE_EVENTS holds %d messages, Postgres %d distinct event ids (a message stored twice in the stream is the difference, when nothing is lost).",
		t.Requests, t.Behind, t.StreamMessages, t.StoredEventIDs))
	withLease, analyzerEvents := 0, 0
	for _, e := range rollouts {
		if e.Actor == "analyzer" {
			analyzerEvents++
			if e.Lease != nil {
				withLease++
			}
		}
	}
	if withLease == 0 {
		out = append(out, fmt.Sprintf("- Two analyzers acting: n/a — none of the %d analyzer rollout events carries `lease` {holder, revision}; this build does not write it (SPEC §11 rev. 4). \"Two holders (metrics)\" is the time in which both analyzers' `graygate_analyzer_lease_held` said 1 at once.", analyzerEvents))
	}
	exported := false
	for _, r := range res.Rows {
		if !strings.Contains(r.VacancyReported, "not exported") {
			continue
		}
		exported = true
	}
	if exported {
		out = append(out, "- Vacancy reported: this build's analyzers export no `graygate_analyzer_lease_vacant_seconds` and their `/readyz` never answered 503 `no analyzer holds the lease`.")
	}
	if ownCerts {
		out = append(out, "- Certificates: the shipped `make-dev-certs.sh` makes a server certificate without clientAuth, with which routes fail; the drill ran the script with `extendedKeyUsage=serverAuth,clientAuth` instead.")
	}
	for _, r := range res.Rows {
		for _, n := range r.Notes {
			out = append(out, fmt.Sprintf("- %s: %s.", r.Fault, n))
		}
	}
	return out
}

// commitOf is the checkout's commit, marked when the tree has changes.
func commitOf(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}
