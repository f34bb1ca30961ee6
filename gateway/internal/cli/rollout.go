package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/schemas/text"
	"gopkg.in/yaml.v3"
)

const rolloutUsage = `usage: gateway rollout <command> [DEPLOYMENT] [flags]

The admin API's rollout calls (SPEC §3) from a terminal. Every change
needs --reason; each prints the resulting entry.

commands:
  list                                        every deployment with a gray
  set DEPLOYMENT --percentage N --reason TEXT  change the gray share (active)
  rollback DEPLOYMENT --reason TEXT            send every request to primary
  resume DEPLOYMENT --percentage N --reason TEXT   active again at N %
  test DEPLOYMENT --reason TEXT                gray for forced requests only
  hold DEPLOYMENT --reason TEXT                keep the percentage: the analyzer may
                                              still roll back, never promote
  release DEPLOYMENT --reason TEXT             end a hold: promotion resumes
  reaffirm DEPLOYMENT [--reason TEXT]          append the current state again, signed
                                              with the gateway's current key (key
                                              rotation, docs/security.md)

flags:
  --admin-url URL          the gateway's admin API (default http:// + the
                           config's gateway.admin_listen)
  --config FILE            configuration file read for admin_listen
                           (default graygate.yaml)
  --expected-revision R    refuse the change unless the deployment is at R
  --json                   print the entry as JSON
  --timeout D              how long to wait for the gateway (default 10s)

environment: GRAYGATE_ADMIN_TOKEN, the admin API's bearer token.

exit codes: 0 done; 1 the change was refused (409: rolled back, testing,
or the revision moved on); 2 bad usage or a request the API refused (400);
3 unauthorized (401/403); 4 the admin API cannot be reached or failed
(5xx); 5 no such deployment (404).
`

// Exit codes of gateway rollout (SPEC §1 rev. 3).
const (
	ExitRefused      = 1
	ExitUsage        = 2
	ExitUnauthorized = 3
	ExitUnavailable  = 4
	ExitNotFound     = 5
)

// ExitError is an error with the process exit code it stands for; main
// exits with Code.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// rolloutFlags are the flags of every rollout command.
type rolloutFlags struct {
	adminURL   string
	config     string
	configSet  bool
	percentage float64
	pctSet     bool
	reason     string
	expected   uint64
	expSet     bool
	json       bool
	timeout    time.Duration
}

// rolloutCommand runs `gateway rollout …`; args start after "rollout".
func rolloutCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, rolloutUsage)
		if len(args) == 0 {
			return exitf(ExitUsage, "rollout: a command is required (list, set, rollback, resume, test, hold, release)")
		}
		return nil
	}
	cmd := args[0]
	var f rolloutFlags
	fset := flag.NewFlagSet("gateway rollout "+cmd, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	fset.StringVar(&f.adminURL, "admin-url", "", "admin API URL")
	fset.StringVar(&f.config, "config", "graygate.yaml", "configuration file")
	fset.Func("percentage", "gray share", func(s string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("not a number: %q", s)
		}
		f.percentage, f.pctSet = v, true
		return nil
	})
	fset.StringVar(&f.reason, "reason", "", "why")
	fset.Func("expected-revision", "revision", func(s string) error {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("not a revision (a whole number ≥ 0): %q", s)
		}
		f.expected, f.expSet = v, true
		return nil
	})
	fset.BoolVar(&f.json, "json", false, "print JSON")
	fset.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait")
	// Flags may come before and after the deployment: parse, take the
	// first argument, parse the rest.
	var positional []string
	rest := args[1:]
	for {
		if err := fset.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, rolloutUsage)
				return nil
			}
			return exitf(ExitUsage, "rollout %s: %v", cmd, err)
		}
		if fset.NArg() == 0 {
			break
		}
		positional = append(positional, fset.Arg(0))
		rest = fset.Args()[1:]
	}
	fset.Visit(func(fl *flag.Flag) {
		if fl.Name == "config" {
			f.configSet = true
		}
	})

	var change *events.RolloutChange
	deployment := ""
	reaffirm := false
	switch cmd {
	case "list":
		if len(positional) > 0 {
			return exitf(ExitUsage, "rollout list takes no deployment, got %q", positional[0])
		}
		if f.pctSet || f.reason != "" || f.expSet {
			return exitf(ExitUsage, "rollout list changes nothing: --percentage, --reason and --expected-revision do not apply")
		}
	case "set", "rollback", "resume", "test", "hold", "release":
		if len(positional) != 1 {
			return exitf(ExitUsage, "rollout %s needs exactly one DEPLOYMENT, got %d arguments", cmd, len(positional))
		}
		deployment = positional[0]
		var err error
		if change, err = changeOf(cmd, &f); err != nil {
			return err
		}
	case "reaffirm":
		if len(positional) != 1 {
			return exitf(ExitUsage, "rollout reaffirm needs exactly one DEPLOYMENT, got %d arguments", len(positional))
		}
		if f.pctSet || f.expSet {
			return exitf(ExitUsage, "rollout reaffirm repeats the current state: --percentage and --expected-revision do not apply")
		}
		deployment, reaffirm = positional[0], true
	default:
		fmt.Fprint(stderr, rolloutUsage)
		return exitf(ExitUsage, "unknown rollout command %q (want list, set, rollback, resume, test, hold, release or reaffirm)", cmd)
	}

	base, err := adminURL(&f)
	if err != nil {
		return err
	}
	token := os.Getenv("GRAYGATE_ADMIN_TOKEN")
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if reaffirm {
		body, err := json.Marshal(struct {
			Reason string `json:"reason,omitempty"`
		}{f.reason})
		if err != nil {
			return err
		}
		return oneEntry(ctx, stdout, f.json, http.MethodPost, base+"/admin/rollouts/"+url.PathEscape(deployment)+"/reaffirm", token, body)
	}
	if change == nil {
		var out struct {
			Rollouts []events.RolloutEntry `json:"rollouts"`
		}
		raw, err := adminCall(ctx, http.MethodGet, base+"/admin/rollouts", token, nil, &out)
		if err != nil {
			return err
		}
		if f.json {
			return writeJSON(stdout, raw)
		}
		printEntries(stdout, out.Rollouts)
		return nil
	}
	body, err := json.Marshal(change)
	if err != nil {
		return err
	}
	return oneEntry(ctx, stdout, f.json, http.MethodPut, base+"/admin/rollouts/"+url.PathEscape(deployment), token, body)
}

// oneEntry makes an admin call answered by one rollout entry (a change or
// a re-affirmation) and prints it: the answer as it came with --json, else
// as a table.
func oneEntry(ctx context.Context, stdout io.Writer, asJSON bool, method, target, token string, body []byte) error {
	var entry events.RolloutEntry
	raw, err := adminCall(ctx, method, target, token, body, &entry)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, raw)
	}
	printEntries(stdout, []events.RolloutEntry{entry})
	return nil
}

// changeOf builds the PUT body of a change command, or a usage error.
func changeOf(cmd string, f *rolloutFlags) (*events.RolloutChange, error) {
	if strings.TrimSpace(f.reason) == "" {
		return nil, exitf(ExitUsage, "rollout %s: --reason is required: say why, it is stored with the change", cmd)
	}
	ch := &events.RolloutChange{Reason: f.reason}
	if f.expSet {
		ch.ExpectedRevision = &f.expected
	}
	switch cmd {
	case "set", "resume":
		if !f.pctSet {
			return nil, exitf(ExitUsage, "rollout %s: --percentage is required", cmd)
		}
		p := f.percentage
		ch.Percentage = &p
		if cmd == "resume" {
			ch.Status = events.StatusActive
		}
	case "hold", "release":
		if f.pctSet {
			return nil, exitf(ExitUsage, "rollout %s keeps the percentage: --percentage does not apply", cmd)
		}
		hold := cmd == "hold"
		ch.Hold = &hold
	case "rollback", "test":
		if f.pctSet {
			return nil, exitf(ExitUsage, "rollout %s stores percentage 0: --percentage does not apply", cmd)
		}
		ch.Status = map[string]events.RolloutStatus{"rollback": events.StatusRolledBack, "test": events.StatusTesting}[cmd]
	}
	return ch, nil
}

// adminURL returns the admin API's base URL: --admin-url, else http:// and
// gateway.admin_listen of the configuration file (its default when the
// default file does not exist).
func adminURL(f *rolloutFlags) (string, error) {
	raw := f.adminURL
	if raw == "" {
		listen, err := adminListen(f.config, f.configSet)
		if err != nil {
			return "", err
		}
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return "", exitf(ExitUsage, "%s: gateway.admin_listen %q: %v", f.config, listen, err)
		}
		switch host {
		case "", "0.0.0.0", "::":
			host = "127.0.0.1" // listening everywhere: this machine answers
		}
		raw = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", exitf(ExitUsage, "--admin-url %q: want http://host:port or https://host:port", raw)
	}
	if u.User != nil {
		return "", exitf(ExitUsage, "--admin-url: credentials do not belong in the URL; set GRAYGATE_ADMIN_TOKEN")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// defaultAdminListen is gateway.admin_listen's default (SPEC §2).
const defaultAdminListen = "127.0.0.1:8081"

// adminListen reads gateway.admin_listen from the configuration file,
// without resolving anything else of it (an operator's terminal need not
// hold the gateway's upstream keys). A ${VAR} value is expanded.
func adminListen(path string, explicit bool) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return defaultAdminListen, nil
	}
	if err != nil {
		return "", exitf(ExitUsage, "read config: %v (or pass --admin-url)", err)
	}
	var doc struct {
		Gateway struct {
			AdminListen string `yaml:"admin_listen"`
		} `yaml:"gateway"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", exitf(ExitUsage, "%s: %v (or pass --admin-url)", path, err)
	}
	v := doc.Gateway.AdminListen
	if v == "" {
		return defaultAdminListen, nil
	}
	if name, ok := strings.CutPrefix(v, "${"); ok && strings.HasSuffix(name, "}") {
		name = strings.TrimSuffix(name, "}")
		if v = os.Getenv(name); v == "" {
			return "", exitf(ExitUsage, "%s: gateway.admin_listen: ${%s} is not set (or pass --admin-url)", path, name)
		}
	}
	return v, nil
}

// maxAdminAnswer caps what is read of an admin API answer.
const maxAdminAnswer = 4 << 20

// adminCall sends one request to the admin API and decodes a 200 answer
// into out, returning its raw bytes; any other answer is an ExitError
// with the API's message and the exit code its status stands for.
func adminCall(ctx context.Context, method, target, token string, body []byte, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, exitf(ExitUsage, "admin request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, exitf(ExitUnavailable, "the admin API at %s cannot be reached: %v", redactURL(target), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer))
	if err != nil {
		return nil, exitf(ExitUnavailable, "read the admin API's answer: %v", err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, exitf(ExitUnavailable, "the admin API answered 200 with something that is not its JSON: %v", err)
		}
		return raw, nil
	}
	msg := apiMessage(raw, deploymentOf(target))
	switch s := resp.StatusCode; {
	case s == http.StatusConflict:
		return nil, exitf(ExitRefused, "refused (409): %s", msg)
	case s == http.StatusNotFound:
		return nil, exitf(ExitNotFound, "not found (404): %s", msg)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		hint := ""
		if token == "" {
			hint = " (GRAYGATE_ADMIN_TOKEN is not set)"
		}
		return nil, exitf(ExitUnauthorized, "not authorized (%d): %s%s", s, msg, hint)
	case s >= 500:
		return nil, exitf(ExitUnavailable, "the admin API failed (%d): %s", s, msg)
	default:
		return nil, exitf(ExitUsage, "the admin API refused the request (%d): %s", s, msg)
	}
}

// apiMessage returns the message of an OpenAI-style error envelope, its
// advice in gateway rollout terms (commandAdvice), or the start of the
// body.
func apiMessage(raw []byte, deployment string) string {
	if code, msg, ok := apiError(raw); ok {
		msg = commandAdvice(code, msg, deployment)
		if code != "" {
			return text.Escape(code + ": " + msg)
		}
		return text.Escape(msg)
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	s = text.Escape(s)
	if s == "" {
		s = "(no body)"
	}
	return s
}

// redactURL drops a URL's query, which never carries anything needed in a
// message.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		u.RawQuery, u.User = "", nil
		return u.String()
	}
	return s
}

// writeJSON prints raw indented.
func writeJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printEntries prints entries as a table.
func printEntries(w io.Writer, entries []events.RolloutEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPLOYMENT\tSTATUS\tPERCENTAGE\tREVISION\tACTOR\tUPDATED\tREASON")
	for _, e := range entries {
		status := string(e.Status)
		if e.Hold {
			status += ", held"
		}
		if !e.Known {
			status += " (unknown: primary only)"
		}
		reason := e.Reason
		if e.Note != "" {
			reason += " [note: " + e.Note + "]"
		}
		actor := string(e.Actor)
		if e.Operator != "" && events.ValidOperator(e.Operator) {
			actor += " (" + e.Operator + ")" // the operator whose token made the change
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", oneLine(e.Deployment), oneLine(status),
			strconv.FormatFloat(e.Percentage, 'f', -1, 64)+"%", e.Revision, text.OrDash(oneLine(actor)),
			text.OrDash(oneLine(e.UpdatedAt)), text.OrDash(oneLine(reason)))
	}
	tw.Flush()
}

// oneLine keeps a table cell on one line and shows whatever it holds:
// control and bidirectional formatting characters escaped (text.Escape:
// a U+202E in a reason is shown as \u202e, never reverses the row, SPEC
// §8), cut at 120 characters.
func oneLine(s string) string { return text.Cell(s, 120) }
