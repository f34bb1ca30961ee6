package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/schemas/spool"
	"github.com/graygate/graygate/schemas/text"
)

// validate checks every rule that involves a value's meaning or other values,
// after decoding and the environment. dir resolves response schema paths.
func (d *decoder) validate(c *Config, dir string) {
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		d.errorf("nats.replicas", nil, "must be between 1 and 5, got %d", c.NATS.Replicas)
	}
	d.validateNATS(&c.NATS)
	d.validateSigning(c)
	d.warnShortTokens(c)
	d.validateGateway(&c.Gateway)
	if d.svc.gateway() {
		d.validateClientAuth(c)
	}
	d.validateSampling(c.SamplingContract)
	bands := d.validateBands(c.Routing.Signals.Context)
	if n := len(c.Routing.Signals.Context); n > MaxContextBands {
		d.errorf(contextPath, nil, "at most %d context bands, got %d", MaxContextBands, n)
	}
	d.validateRoutes(c, bands)
	for _, name := range c.DeploymentOrder {
		dep := c.Deployments[name]
		d.validateDeployment(dep, dir)
		p := "deployments." + name
		d.validateArmParams(p+".primary", dep.Primary.Params, c.SamplingContract)
		if dep.Gray != nil {
			d.validateArmParams(p+".gray", dep.Gray.Params, c.SamplingContract)
		}
	}
	d.validateAnalyzer(&c.Analyzer)
	d.warnTTFTLimit(c)
	d.warnBufferedStreams(c)
	d.validateCollector(&c.Collector)
	d.validateConsole(&c.Collector.Console, dir)
}

func (d *decoder) validateGateway(g *Gateway) {
	d.listen("gateway.listen", g.Listen)
	d.listen("gateway.admin_listen", g.AdminListen)
	if !d.failed["gateway.listen"] && !d.failed["gateway.admin_listen"] && sameListener(g.Listen, g.AdminListen) {
		d.errorf("gateway.admin_listen", nil, "must differ from gateway.listen (%s): both would bind the same port", g.Listen)
	}
	d.positiveSize("gateway.max_body_bytes", g.MaxBodyBytes)
	d.spoolSize("gateway.spool_max_bytes", g.SpoolMaxBytes)
	d.positiveSize("gateway.sample_max_bytes", g.SampleMaxBytes)
	if g.MaxToolSteps < 0 {
		d.errorf("gateway.max_tool_steps", nil, "must not be negative (0 disables the limit), got %d", g.MaxToolSteps)
	}
	d.spoolDir("gateway.spool_dir", g.SpoolDir)
	d.positiveDuration("gateway.rollout_stale_after", g.RolloutStaleAfter)
	if g.GrayUnwatchedAfter < 0 && !d.failed["gateway.gray_unwatched_after"] {
		d.errorf("gateway.gray_unwatched_after", nil, "must not be negative (0: never hold an unwatched gray), got %s", g.GrayUnwatchedAfter)
	}
	d.positiveDuration("gateway.unwatched_recover_after", g.UnwatchedRecoverAfter)
	if (g.UnwatchedHoldAbove < 0 || g.UnwatchedHoldAbove > 100) && !d.failed["gateway.unwatched_hold_above"] {
		d.errorf("gateway.unwatched_hold_above", nil, "must be a percentage 0-100, got %v", g.UnwatchedHoldAbove)
	}
	switch g.RequestLog {
	case RequestLogAll, RequestLogGray, RequestLogOff:
	default:
		if !d.failed["gateway.request_log"] {
			d.errorf("gateway.request_log", nil, "must be all, gray or off, got %q", g.RequestLog)
		}
	}
	d.positiveDuration("gateway.stats_interval", g.StatsInterval)
	if g.StatsInterval > time.Hour {
		d.errorf("gateway.stats_interval", nil, "must be at most 1h, got %s", g.StatsInterval)
	} else if g.StatsInterval > 0 && (time.Hour%g.StatsInterval != 0) {
		d.errorf("gateway.stats_interval", nil, "must divide an hour evenly (1s, 2s, 5s, 10s, 1m, …), got %s", g.StatsInterval)
	}
	d.atLeastOne("gateway.max_client_connections", g.MaxClientConnections)
	if g.MaxConnectionsPerSource < 0 && !d.failed["gateway.max_connections_per_source"] {
		d.errorf("gateway.max_connections_per_source", nil, "must not be negative (0 turns the per-source limit off), got %d", g.MaxConnectionsPerSource)
	}
	d.positiveDuration("gateway.read_timeout", g.ReadTimeout)
	d.positiveDuration("gateway.write_timeout", g.WriteTimeout)
	d.positiveDuration("gateway.idle_timeout", g.IdleTimeout)
	d.positiveSize("gateway.max_sse_event_bytes", g.MaxSSEEventBytes)
	d.positiveSize("gateway.max_tool_arguments_bytes", g.MaxToolArgumentsBytes)
	d.positiveSize("gateway.max_buffered_answer_bytes", g.MaxBufferedAnswerBytes)
}

func (d *decoder) validateRoutes(c *Config, bands map[string]bool) {
	seen := map[string]int{}
	for i, r := range c.Routing.Routes {
		p := indexPath("routing.routes", i)
		if r.Model == "" && !d.failed[p+".model"] {
			d.errorf(p+".model", nil, "a route needs a model (the value clients send)")
		} else if err := text.Check("the model", r.Model); err != nil {
			d.errorf(p+".model", nil, "%v", err)
		} else if j, dup := seen[r.Model]; dup && r.Model != "" {
			d.errorf(p+".model", nil, "duplicate route model %q (also %s)", r.Model, indexPath("routing.routes", j))
		} else {
			seen[r.Model] = i
		}
		if len(r.Candidates) == 0 {
			d.errorf(p+".candidates", nil, "a route needs at least one candidate")
		}
		for j, cand := range r.Candidates {
			cp := indexPath(p+".candidates", j)
			switch {
			case d.failed[cp+".deployment"]:
			case cand.Deployment == "":
				d.errorf(cp+".deployment", nil, "a candidate needs a deployment")
			case c.Deployments[cand.Deployment] == nil:
				d.errorf(cp+".deployment", nil, "no deployment named %q", cand.Deployment)
			}
			for k, band := range cand.Context {
				if !bands[band] && !d.failed[contextPath] && !d.failed[indexPath(cp+".context", k)] {
					d.errorf(indexPath(cp+".context", k), nil, "no context band named %q in %s", band, contextPath)
				}
			}
		}
	}
}

func (d *decoder) validateDeployment(dep *Deployment, dir string) {
	p := "deployments." + dep.Name
	if !namePattern.MatchString(dep.Name) {
		d.errorf(p, nil, "invalid deployment name %q: use letters, digits, _ and -", dep.Name)
	}
	if dep.ContextWindow < 0 {
		d.errorf(p+".context_window", nil, "must not be negative (omit it when unknown), got %d", dep.ContextWindow)
	}
	if d.has(p + ".primary") {
		d.validateUpstream(p+".primary", &dep.Primary, dir, false)
	} else {
		d.errorf(p, nil, "a deployment needs a primary upstream {url, model}")
	}
	if dep.Gray != nil {
		d.validateUpstream(p+".gray", dep.Gray, dir, true)
	}
	rp := p + ".rollout"
	if dep.Gray == nil && d.has(rp) {
		d.warnf(rp, nil, "has no effect: the deployment has no gray upstream")
	}
	if dep.Gray != nil || d.has(rp) {
		d.validateRollout(rp, &dep.Rollout, dir)
	}
}

// validateUpstream checks an upstream; a gray may omit url (and model):
// it then uses primary's upstream (SPEC §6.6).
func (d *decoder) validateUpstream(p string, u *Upstream, dir string, gray bool) {
	sameUpstream := gray && !u.HasUpstream() && !d.failed[p+".url"]
	sources := 0
	for _, set := range []bool{u.URL != "", len(u.Endpoints) > 0, u.Discovery != nil} {
		if set {
			sources++
		}
	}
	switch {
	case d.failed[p+".url"]:
	case u.Endpoints != nil && len(u.Endpoints) == 0:
		// An empty list (a template that rendered none) is a mistake,
		// never "no upstream": on a gray it would quietly send gray's
		// traffic to primary's upstream.
		d.errorf(p+".endpoints", nil, "is empty: list at least one replica address (or give url for one)")
	case sameUpstream:
	case sources > 1:
		d.errorf(p+".url", nil, "url, endpoints and discovery are mutually exclusive: set one")
	case u.IsPool():
	case u.URL == "":
		d.errorf(p+".url", nil, "an upstream needs a url (or endpoints, or discovery)")
	default:
		if why := checkUpstreamURL(u.URL); why != "" {
			d.errorf(p+".url", nil, "%s", why)
		}
	}
	// An upstream's TLS and prompt files are the gateway's alone (SPEC §2:
	// the collector and the analyzer never need a prompt file); the
	// others take the keys as written.
	if d.svc.gateway() {
		d.validateTLS(p, u, dir)
		if u.Prompt != nil {
			d.validatePrompt(p, u.Prompt, dir)
		}
	}
	if u.Model == "" && !sameUpstream && !d.failed[p+".model"] {
		d.errorf(p+".model", nil, "an upstream needs the model name it serves")
	} else if err := text.Check("the model", u.Model); err != nil {
		d.errorf(p+".model", nil, "%v", err)
	}
	d.positiveDuration(p+".timeout", u.Timeout)
	d.positiveDuration(p+".stream_idle_timeout", u.StreamIdleTimeout)
	if u.MaxConnections < 0 && !d.failed[p+".max_connections"] {
		d.errorf(p+".max_connections", nil, "must be 0 (no limit) or more, got %d", u.MaxConnections)
	}
	d.positiveDuration(p+".connect_timeout", u.ConnectTimeout)
	d.positiveDuration(p+".max_duration", u.MaxDuration)
	d.validatePool(p, u)
}

// checkUpstreamURL explains why raw is not an absolute http(s) base URL,
// or returns "". The URL is echoed only with its credentials redacted.
func checkUpstreamURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "not a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "must be an absolute http or https URL (scheme " + strconv.Quote(u.Scheme) + ")"
	}
	if u.Host == "" || u.Hostname() == "" {
		return "must be an absolute http or https URL with a host"
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535, got " + port
		}
	}
	if u.Fragment != "" || u.RawQuery != "" {
		return "must not have a query or a fragment"
	}
	if base, ok := endpointBase(u); ok {
		return "upstream url " + RedactURL(raw) + " ends in an endpoint path; use the base URL " + base
	}
	return ""
}

// endpointPaths are the API paths the gateway appends to an upstream's
// base URL (SPEC §3): a url that already ends in one would be sent
// .../chat/completions/chat/completions.
var endpointPaths = []string{"/chat/completions", "/completions", "/responses", "/embeddings"}

// endpointBase reports whether u's path ends in an endpoint path (any
// case, with or without a trailing slash), and the base URL to configure
// instead, credentials redacted. A base without a path is read as /v1,
// and the advice says so.
func endpointBase(u *url.URL) (string, bool) {
	p := strings.TrimSuffix(u.Path, "/")
	for _, e := range endpointPaths {
		if len(p) < len(e) || !strings.EqualFold(p[len(p)-len(e):], e) {
			continue
		}
		b := *u
		b.Path, b.RawPath = p[:len(p)-len(e)], ""
		base := RedactURL(b.String())
		if b.Path == "" {
			base += " (a url without a path means /v1)"
		}
		return base, true
	}
	return "", false
}

func (d *decoder) validateRollout(p string, r *Rollout, dir string) {
	if r.Mode != ModeCanary && r.Mode != ModeShadow {
		d.errorf(p+".mode", nil, "must be %s or %s, got %q", ModeCanary, ModeShadow, r.Mode)
	}
	d.percentage(p+".percentage", r.Percentage)
	if why := checkStickyKey(r.StickyKey); why != "" {
		d.errorf(p+".sticky_key", nil, "%s", why)
	}
	if !isToken(r.ForceHeader) {
		d.errorf(p+".force_header", nil, "must be an HTTP header name, got %q", r.ForceHeader)
	}
	d.positiveDuration(p+".timeout", r.Timeout)
	d.atLeastOne(p+".shadow_concurrency", r.ShadowConcurrency)
	if r.SchemaTarget != TargetContent && r.SchemaTarget != TargetBody {
		d.errorf(p+".schema_target", nil, "must be %s or %s, got %q", TargetContent, TargetBody, r.SchemaTarget)
	}
	if r.StreamValidation != StreamBuffer && r.StreamValidation != StreamObserve {
		d.errorf(p+".stream_validation", nil, "must be %s or %s, got %q", StreamBuffer, StreamObserve, r.StreamValidation)
	}
	if r.ResponseSchema != "" && d.svc.gateway() {
		d.loadSchema(p+".response_schema", r, dir)
	}
}

// checkStickyKey explains why k is not user, token, none or header:NAME, or returns "".
func checkStickyKey(k string) string {
	switch {
	case k == StickyUser || k == StickyNone || k == StickyToken:
		return ""
	case strings.HasPrefix(k, StickyHeaderPrefix):
		if isToken(strings.TrimPrefix(k, StickyHeaderPrefix)) {
			return ""
		}
		return "header name " + strconv.Quote(strings.TrimPrefix(k, StickyHeaderPrefix)) + " is not a valid HTTP header name"
	}
	return "must be user, token, none or header:NAME, got " + strconv.Quote(k)
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), what a header
// name is made of.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// percentage checks a traffic share: in [0, 100] with at most two decimals,
// the precision of the gateway's assignment (basis points).
func (d *decoder) percentage(p string, v float64) {
	if v < 0 || v > 100 {
		d.errorf(p, nil, "must be between 0 and 100, got %s", formatNumber(v))
		return
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if _, frac, ok := strings.Cut(s, "."); ok && len(frac) > 2 {
		d.errorf(p, nil, "at most two decimals, got %s", s)
	}
}

func (d *decoder) validateAnalyzer(a *Analyzer) {
	d.listen("analyzer.listen", a.Listen)
	d.positiveDuration("analyzer.interval", a.Interval)
	d.positiveDuration("analyzer.window", a.Window)
	if a.MinRequests < 0 {
		d.errorf("analyzer.min_requests", nil, "must not be negative, got %d", a.MinRequests)
	}
	if !(a.Confidence >= 0.5 && a.Confidence < 1) && !d.failed["analyzer.confidence"] {
		d.errorf("analyzer.confidence", nil, "must be in [0.5, 1), got %s", formatNumber(a.Confidence))
	}
	d.positiveDuration("analyzer.read_timeout", a.ReadTimeout)
	d.positiveDuration("analyzer.write_timeout", a.WriteTimeout)
	d.positiveDuration("analyzer.idle_timeout", a.IdleTimeout)
	if a.LeaseTTL < MinLeaseTTL && !d.failed["analyzer.lease_ttl"] {
		// Renewed every lease_ttl/3 over the network and acted on within
		// lease_ttl/2 of a renewal: below a second a round trip to NATS is
		// a large share of it (and under 3ns the renewal ticker is 0).
		d.errorf("analyzer.lease_ttl", nil, "must be at least %s, got %s", MinLeaseTTL, a.LeaseTTL)
	}
	d.spoolSize("analyzer.spool_max_bytes", a.SpoolMaxBytes)
	if a.SpoolDir == "" {
		// Not spoolDir's check of the place: an analyzer whose spool
		// directory cannot be used serves with a spool in memory.
		d.errorf("analyzer.spool_dir", nil, "must not be empty")
	}
	g := a.Gates
	for _, gate := range []struct {
		key string
		v   float64
	}{
		{"token_inflation_max", g.TokenInflationMax},
		{"schema_failure_rate_max", g.SchemaFailureRateMax},
		{"ttft_p99_ratio_max", g.TTFTP99RatioMax},
		{"latency_p99_ratio_max", g.LatencyP99RatioMax},
		{"tool_loop_ratio_max", g.ToolLoopRatioMax},
		{"gray_error_rate_max", g.GrayErrorRateMax},
	} {
		if gate.v < 0 {
			d.errorf("analyzer.gates."+gate.key, nil, "must not be negative, got %s", formatNumber(gate.v))
		}
	}
	for _, gate := range []struct {
		key string
		v   time.Duration
	}{
		{"ttft_p99_max", g.TTFTP99Max},
		{"latency_p99_min_increase", g.LatencyP99MinIncrease},
		{"ttft_p99_min_increase", g.TTFTP99MinIncrease},
	} {
		if gate.v < 0 {
			d.errorf("analyzer.gates."+gate.key, nil, "must not be negative, got %s", gate.v)
		}
	}
	if pr := a.Promotion; pr != nil {
		if len(pr.Steps) == 0 && !d.failed["analyzer.promotion.steps"] {
			d.errorf("analyzer.promotion.steps", nil, "a promotion needs at least one step")
		}
		for i, s := range pr.Steps {
			p := indexPath("analyzer.promotion.steps", i)
			if d.failed[p] {
				continue // refused as it was read (NaN, a string): said once
			}
			if s <= 0 || s > 100 {
				d.errorf(p, nil, "must be in (0, 100], got %s", formatNumber(s))
				continue
			}
			d.percentage(p, s)
			if i > 0 && s <= pr.Steps[i-1] {
				d.errorf(p, nil, "steps must increase strictly: %s follows %s", formatNumber(s), formatNumber(pr.Steps[i-1]))
			}
		}
		if pr.Hold <= 0 && !d.failed["analyzer.promotion.hold"] {
			d.errorf("analyzer.promotion.hold", nil, "must be positive (how long a step holds with every gate passing)")
		}
		if pr.MinSoak < 0 {
			d.errorf("analyzer.promotion.min_soak", nil, "must not be negative, got %s", pr.MinSoak)
		}
		if (pr.MinPercentage < 0 || pr.MinPercentage > 100) && !d.failed["analyzer.promotion.min_percentage"] {
			d.errorf("analyzer.promotion.min_percentage", nil, "must be in [0, 100], got %s", formatNumber(pr.MinPercentage))
		}
	}
}

func (d *decoder) validateCollector(c *Collector) {
	d.listen("collector.listen", c.Listen)
	d.atLeastOne("collector.batch_size", c.BatchSize)
	d.positiveDuration("collector.flush_interval", c.FlushInterval)
	d.positiveDuration("collector.retention", c.Retention)
	d.positiveSize("collector.max_payload_bytes", c.MaxPayloadBytes)
	d.positiveDuration("collector.read_timeout", c.ReadTimeout)
	d.positiveDuration("collector.write_timeout", c.WriteTimeout)
	d.positiveDuration("collector.idle_timeout", c.IdleTimeout)
}

// listen checks a host:port listen address (host may be empty: all
// interfaces; port 0 picks a free port).
func (d *decoder) listen(p, addr string) {
	if d.failed[p] {
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		d.errorf(p, nil, "invalid listen address %q: want host:port", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		d.errorf(p, nil, "invalid listen address %q: port must be a number in [0, 65535]", addr)
	}
}

// sameListener reports whether listening on a and on b would take the
// same port: the same port (not 0) on the same host, or on the
// wildcard, which every host's port overlaps; localhost is the loopback.
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	norm := func(h string) string {
		switch h {
		case "", "0.0.0.0", "::":
			return "*"
		case "localhost":
			return "127.0.0.1"
		}
		if ip := net.ParseIP(h); ip != nil {
			return ip.String()
		}
		return h
	}
	na, nb := norm(ha), norm(hb)
	return na == nb || na == "*" || nb == "*"
}

func (d *decoder) atLeastOne(p string, v int) {
	if v < 1 && !d.failed[p] {
		d.errorf(p, nil, "must be at least 1, got %d", v)
	}
}

// MinLeaseTTL is the shortest analyzer.lease_ttl.
const MinLeaseTTL = time.Second

// spoolDir refuses an empty gateway spool directory, and one that cannot
// be created where it is: the path, or the nearest of its parents that
// exists, is a file (validate would pass what serve refuses at start).
func (d *decoder) spoolDir(p, dir string) {
	if dir == "" {
		d.errorf(p, nil, "must not be empty")
		return
	}
	for at := filepath.Clean(dir); ; at = filepath.Dir(at) {
		if fi, err := os.Stat(at); err == nil {
			if !fi.IsDir() {
				d.errorf(p, nil, "%s is a file, not a directory: the spool cannot be made there", at)
			}
			return
		}
		if parent := filepath.Dir(at); parent == at {
			return
		}
	}
}

func (d *decoder) positiveDuration(p string, v time.Duration) {
	if v <= 0 && !d.failed[p] {
		d.errorf(p, nil, "must be positive, got %s", v)
	}
}

func (d *decoder) positiveSize(p string, v Size) {
	if v <= 0 && !d.failed[p] {
		d.errorf(p, nil, "must be positive, got %s", v)
	}
}

// spoolSize refuses a spool bound the spool cannot open with (SPEC §2:
// what validate accepts serves).
func (d *decoder) spoolSize(p string, v Size) {
	if v < spool.MinBytes && !d.failed[p] {
		d.errorf(p, nil, "must be at least %dB (what a spool of one record needs), got %s", spool.MinBytes, v)
	}
}

// validateNATS checks the service's NATS identity (SPEC §7, rev. 2): at
// most one of user with password_env, nkey_seed_file and creds_file, and
// a TLS client certificate with its key.
func (d *decoder) validateNATS(n *NATS) {
	var kinds []string
	if n.User != "" || n.PasswordEnv != "" {
		kinds = append(kinds, "user")
		switch {
		case n.User == "" && !d.failed["nats.user"]:
			d.errorf("nats.user", nil, "nats.password_env needs nats.user")
		case n.PasswordEnv == "" && !d.failed["nats.password_env"]:
			d.errorf("nats.password_env", nil, "nats.user needs password_env, the variable holding its password")
		}
	}
	if n.NKeySeedFile != "" {
		kinds = append(kinds, "nkey_seed_file")
	}
	if n.CredsFile != "" {
		kinds = append(kinds, "creds_file")
	}
	if len(kinds) > 1 {
		d.errorf("nats", nil, "at most one NATS identity: user with password_env, nkey_seed_file or creds_file (NATS_CREDS sets creds_file); got %s", strings.Join(kinds, " and "))
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		d.errorf("nats.tls", nil, "cert_file and key_file go together (a client certificate and its key)")
	}
	if n.APIPrefix != "" {
		if err := checkAPIPrefix(n.APIPrefix); err != nil {
			d.errorf("nats.api_prefix", nil, "%v", err)
		}
	}
	if err := checkNATSURL(n.URL); err != nil {
		d.errorf("nats.url", nil, "%v", err)
	}
	if u, err := url.Parse(n.URL); n.URL != "" && err == nil && u.User != nil && len(kinds) > 0 {
		d.errorf("nats.url", nil, "must not carry credentials when nats.%s is set", kinds[0])
	}
}

// checkNATSURL reads raw ("" for none) as the NATS client does: servers
// separated by commas, each a URL or host:port (nats:// then), and not
// websocket and plain ones mixed. The client refuses at once what does
// not parse (a port that is not a number), retrying nothing.
func checkNATSURL(raw string) error {
	if raw == "" {
		return nil
	}
	ws := -1
	for i, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return fmt.Errorf("server %d of %q is empty", i+1, RedactURLs(raw))
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("server %d is not a URL: %s", i+1, strings.TrimPrefix(RedactURLs(err.Error()), "parse "))
		}
		if u.Hostname() == "" {
			return fmt.Errorf("server %d (%s) names no host", i+1, RedactURL(s))
		}
		isWS := 0
		if u.Scheme == "ws" || u.Scheme == "wss" {
			isWS = 1
		}
		if ws >= 0 && ws != isWS {
			return fmt.Errorf("websocket (ws://, wss://) and other servers cannot be mixed")
		}
		ws = isWS
	}
	return nil
}

// validateClientAuth is secure by default (SPEC §11): /v1/* on a
// non-loopback listen needs client tokens unless allow_unauthenticated
// says otherwise, and then warns. Force tokens alone do not close /v1/*
// (they only grant the force header), so they do not count here.
func (d *decoder) validateClientAuth(c *Config) {
	g := &c.Gateway
	if d.failed["gateway.listen"] {
		return
	}
	if len(g.ClientTokens) == 0 && !IsLoopback(g.Listen) {
		if g.AllowUnauthenticated {
			d.warnf("gateway.allow_unauthenticated", nil,
				"true: /v1/* on %s serves anyone who can reach it, without a token (no client tokens in %s)",
				g.Listen, g.ClientTokensEnv)
		} else {
			d.errorf("gateway.listen", nil,
				"%s is not a loopback address and no client tokens are set (%s, gateway.client_tokens_env): set tokens, listen on loopback, or set gateway.allow_unauthenticated: true to serve /v1/* to anyone",
				g.Listen, g.ClientTokensEnv)
		}
	}
	if len(g.ForceTokens) == 0 {
		for _, name := range c.DeploymentOrder {
			p := "deployments." + name + ".rollout.force_header"
			if c.Deployments[name].Gray != nil && d.has(p) {
				d.warnf(p, nil, "no force tokens are set (%s, gateway.force_tokens_env): nobody can use %s", g.ForceTokensEnv, c.Deployments[name].Rollout.ForceHeader)
			}
		}
	}
}
