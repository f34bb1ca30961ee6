package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/graygate/graygate/analyzer/internal/engine"
	"github.com/graygate/graygate/analyzer/internal/gate"
	"github.com/graygate/graygate/analyzer/internal/rollout"
	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
)

// status asks a running analyzer for GET /v1/status and prints it.
func status(ctx context.Context, path, addr string, asJSON bool, out io.Writer) error {
	if addr == "" {
		cfg, _, err := config.Load(path, config.ForAnalyzerTools)
		if err != nil {
			return fmt.Errorf("%s:\n%w (or give --addr)", path, err)
		}
		addr = cfg.Analyzer.Listen
	}
	body, err := fetchStatus(ctx, dialable(addr))
	if err != nil {
		return err
	}
	if asJSON {
		_, err := out.Write(body)
		return err
	}
	var s engine.Status
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("read analyzer status: %w", err)
	}
	return writeTable(out, &s)
}

func fetchStatus(ctx context.Context, addr string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + addr + "/v1/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask the analyzer at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// dialable turns a listen address into one to connect to: an unspecified
// host (":8083", "0.0.0.0:8083", "[::]:8083") becomes loopback.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// writeTable prints the status as a header line and an aligned table with
// one row per gate and stream class — {gate, stream, estimate, bound,
// threshold, gray_n, primary_n, verdict} of the deciding layer, then each
// layer's verdict and bound (window, epoch) and, for a gate not decided on
// the epoch, the gray requests it still needs; a deployment's columns are
// written on its first row. Each deployment's epoch follows the table.
func writeTable(out io.Writer, s *engine.Status) error {
	role := "follower (evaluates, does not publish)"
	if s.Leader {
		role = "leader (publishes)"
	}
	ready := "ready"
	switch {
	case len(s.NotReady) > 0:
		ready = "NOT READY (" + text.Escape(strings.Join(s.NotReady, "; ")) + ")"
	case !s.Ready:
		ready = "NOT READY (rebuilding the window or reading the rollout log)"
	}
	if s.LeaseVacantSeconds > 0 {
		ready += fmt.Sprintf("; no analyzer has held the lease for %s", seconds(s.LeaseVacantSeconds))
	}
	fmt.Fprintf(out, "analyzer %s: %s, %s\n", text.Escape(s.Source), role, ready)
	fmt.Fprintf(out, "window %s in %s buckets, every %s, min_requests %d; window rebuilt from %d statistics in %s\n",
		seconds(s.WindowSeconds), seconds(s.BucketSeconds), seconds(s.IntervalSeconds), s.MinRequests,
		s.ReplayEvents, seconds(s.ReplaySeconds))
	fmt.Fprintln(out, epochsLine(s))
	fmt.Fprintln(out)
	if len(s.Deployments) == 0 {
		fmt.Fprintln(out, "no deployment has a gray upstream")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPLOYMENT\tROLLOUT\tGRAY\tPRIMARY\tGATE\tSTREAM\tESTIMATE\tBOUND\tTHRESHOLD\tGRAY_N\tPRIMARY_N\tVERDICT\tWINDOW\tEPOCH\tNEEDS")
	for _, d := range s.Deployments {
		if d.At.IsZero() {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t(not evaluated yet)\n", text.Escape(d.Deployment), rolloutCell(d.Rollout))
			continue
		}
		for i, g := range d.Gates {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t", text.Escape(d.Deployment), rolloutCell(d.Rollout), d.GrayRequests, d.PrimaryRequests)
			} else {
				fmt.Fprint(tw, "\t\t\t\t")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", gateCell(g), streamCells.Of(g.Stream), valueCell(g.Gate, g.Estimate, true),
				valueCell(g.Gate, g.Bound, true), valueCell(g.Gate, &g.Threshold, false), g.GrayN, g.PrimaryN, text.Escape(string(g.Verdict)),
				layerCell(g.Gate, g.Window), layerCell(g.Gate, g.Epoch), needsCell(g))
		}
		fmt.Fprintf(tw, "\t\t\t\toverall\t\t\t\t\t\t\t%s\n", text.Escape(string(d.Verdict)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range s.Deployments {
		if line := epochLine(d.Evaluation); line != "" {
			fmt.Fprintln(out, line)
		}
		if ep := d.Epoch; ep != nil && ep.Note != "" {
			fmt.Fprintf(out, "%s: epoch %d: %s\n", text.Escape(d.Deployment), ep.Index, text.Escape(ep.Note))
		}
		if r := d.Rollout; r != nil && r.Note != "" {
			fmt.Fprintf(out, "%s: rollout revision %d skipped: %s\n", text.Escape(d.Deployment), r.Revision, text.Escape(r.Note))
		}
		if a := d.LastAction; a != nil {
			line := fmt.Sprintf("%s: last %s at %s", text.Escape(d.Deployment), text.Escape(string(a.Kind)), a.At.UTC().Format(time.RFC3339))
			if a.Error != "" {
				line += " not stored: " + text.Escape(a.Error)
			} else {
				line += fmt.Sprintf(" (revision %d): %s", a.Revision, text.Escape(a.Reason))
			}
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

// epochsLine says whether the epochs are rebuilt and where their
// checkpoints are.
func epochsLine(s *engine.Status) string {
	line := "epochs rebuilt"
	if !s.EpochsRebuilt {
		line = "epochs REBUILDING (every epoch verdict inconclusive until the replay is done)"
	}
	if s.CheckpointBucket != "" {
		line += "; checkpoints in " + text.Escape(s.CheckpointBucket)
	}
	if len(s.Restored) > 0 {
		line += fmt.Sprintf(", restored at start for %s", text.Escape(strings.Join(s.Restored, ", ")))
	}
	if s.LastCheckpoint != nil {
		line += ", last written " + s.LastCheckpoint.UTC().Format(time.RFC3339)
	}
	if s.CheckpointError != "" {
		line += "; checkpoint error: " + text.Escape(s.CheckpointError)
	}
	return line
}

// epochLine describes a deployment's epoch: its number, start, length,
// requests, periods, fingerprints and the time on the current step.
func epochLine(ev engine.Evaluation) string {
	ep := ev.Epoch
	if ep == nil {
		return ""
	}
	age := "-"
	if !ev.At.IsZero() {
		age = engine.ShortDuration(ev.At.Sub(ep.Start))
	}
	line := fmt.Sprintf("%s: epoch %d since %s (%s; %s gray, %s primary requests; %d periods, min %s%%); fingerprints gray %s, primary %s",
		text.Escape(ev.Deployment), ep.Index, ep.Start.UTC().Format(time.RFC3339), age, engine.Thousands(ep.GrayRequests), engine.Thousands(ep.PrimaryRequests),
		ep.Periods, strconv.FormatFloat(ep.MinPercentage, 'f', -1, 64), text.OrDash(text.Escape(ep.GrayFingerprint)), text.OrDash(text.Escape(ep.PrimaryFingerprint)))
	if ev.StepSince != nil {
		line += fmt.Sprintf("; on this step %s", engine.ShortDuration(time.Duration(ev.StepSeconds*float64(time.Second))))
	}
	if !ep.Rebuilt {
		line += "; REBUILDING: epoch verdicts inconclusive"
	}
	return line
}

// layerCell writes one layer's verdict, estimate, bound and gray
// attempts: "pass est 2.00% bound 11.00% n 12,400"; a ratio gate that
// failed says at which quantile: "fail at p50 est 2.01x bound 1.52x n …".
// gateCell names the gate, and the context band whose own test failed
// it (SPEC §9 "Per band"): a regression on long contexts alone reads
// apart from one of the whole stream class.
func gateCell(g events.GateResult) string {
	if g.Band != "" {
		return text.Escape(string(g.Gate)) + " (band " + text.Escape(g.Band) + ")"
	}
	return text.Escape(string(g.Gate))
}

func layerCell(g events.Gate, l *events.LayerResult) string {
	if l == nil {
		return "-"
	}
	cell := text.Escape(string(l.Verdict))
	if l.Quantile != nil {
		cell += " at " + engine.QuantileName(*l.Quantile)
	}
	if l.Estimate != nil {
		cell += " est " + valueCell(g, l.Estimate, true)
	}
	if l.Bound != nil {
		cell += " bound " + valueCell(g, l.Bound, true)
	}
	return cell + " n " + engine.Thousands(l.GrayN)
}

// needsCell says how many more gray requests a gate undecided on the
// epoch needs at the current estimates, and which way it is heading:
// "pass in ~1,900 more gray requests"; "cannot decide" when no amount
// would do; empty once decided.
func needsCell(g events.GateResult) string {
	if g.Epoch == nil || g.Epoch.Verdict != events.VerdictInconclusive {
		return ""
	}
	if g.NeedsGray == nil {
		if g.Why != "" {
			return "cannot decide: " + g.Why
		}
		return "cannot decide"
	}
	if *g.NeedsGray <= 0 {
		return ""
	}
	way := "decide"
	if e := g.Epoch.Estimate; e != nil {
		way = "fail"
		if *e <= g.Threshold {
			way = "pass"
		}
	}
	out := fmt.Sprintf("%s in ~%s more gray requests", way, engine.Thousands(int64(math.Ceil(*g.NeedsGray))))
	if g.Why != "" {
		out += ": " + g.Why
	}
	return out
}

// streamCells name a gate's stream class: "all" for a gate over every
// attempt.
var streamCells = gate.StreamClassNames{gate.AllAttempts: "all", gate.NonStreamed: "non-stream", gate.Streamed: "stream"}

func rolloutCell(r *rollout.State) string {
	if r == nil {
		return "(no event yet)"
	}
	return fmt.Sprintf("%s %s%% rev %d", text.Escape(string(r.Status)), strconv.FormatFloat(r.Percentage, 'f', -1, 64), r.Revision)
}

// valueCell formats a gate estimate or bound (signed: token inflation with
// its sign) or threshold: shares and token inflation as percentages (gray
// errors and tool loops in points above primary's), p99 ratios as
// multiples, ttft_p99 in seconds.
func valueCell(g events.Gate, v *float64, signed bool) string {
	if v == nil {
		return "-"
	}
	switch g {
	case events.GateTTFTP99:
		return strconv.FormatFloat(*v, 'f', 3, 64) + "s"
	case events.GateTTFTP99Ratio, events.GateLatencyP99Ratio:
		return strconv.FormatFloat(*v, 'f', 2, 64) + "x"
	case events.GateTokenInflation:
		s := strconv.FormatFloat(*v*100, 'f', 2, 64) + "%"
		if signed && *v > 0 {
			s = "+" + s
		}
		return s
	default:
		return strconv.FormatFloat(*v*100, 'f', 2, 64) + "%"
	}
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
