// Package config is the graygate configuration file: one YAML document that
// all three services read, each using the sections it needs.
//
// The file format is a contract between the operator and every service, which
// is why it lives under schemas/ next to the event types: the gateway, the
// collector and the analyzer must agree on it key for key (unknown keys are
// errors everywhere).
//
// Load and Parse read a file in one pass that reports every problem, each
// with its key path (`routing.signals.context[2].max_tokens: ...`), in file
// order. What an operator may rely on beyond SPEC §2:
//
//   - A key that is absent or null keeps its default; an explicit zero or
//     empty string is kept (max_tool_steps: 0 disables the limit, nats.url: ""
//     disables events).
//   - `${NAME}` is expanded in every scalar value (not in keys); a `$` not
//     followed by `{` is literal. Expanded values are literal text: they are
//     never typed by YAML again. In a flow mapping ({...}) quote the value.
//   - Integers are decimal; numbers are decimal floats (no NaN or Inf); a
//     quoted value is a string and is refused where a number is expected,
//     except in context band bounds (SPEC §5.2). Sizes are a decimal byte
//     count with an optional B, KiB, MiB or GiB suffix; durations use Go
//     syntax; both may be quoted.
//   - Anchors, aliases and merge keys (`<<: *base`) work everywhere.
//   - Messages never show a secret (tokens, keys, passwords in URLs).
package config

import (
	"net/netip"
	"time"
)

// Config is the whole file after loading, environment expansion and defaults.
type Config struct {
	// NATS is the event log connection. URL empty disables events.
	NATS NATS `yaml:"nats"`
	// Postgres is the sample store (collector, `collector samples`).
	Postgres Postgres `yaml:"postgres"`
	// Gateway holds the gateway's listeners and limits.
	Gateway Gateway `yaml:"gateway"`
	// SamplingContract is nil when the section is omitted (contract disabled).
	SamplingContract *SamplingContract `yaml:"sampling_contract"`
	// Routing maps client model names to candidate deployments.
	Routing Routing `yaml:"routing"`
	// Deployments by name; DeploymentOrder keeps the file's order.
	Deployments     map[string]*Deployment `yaml:"deployments"`
	DeploymentOrder []string               `yaml:"-"`
	// Analyzer configures gate evaluation and promotion.
	Analyzer Analyzer `yaml:"analyzer"`
	// Collector configures the event writer and the sample-store API.
	Collector Collector `yaml:"collector"`
}

// NATS is the `nats` section.
type NATS struct {
	// URL of the NATS server; NATS_URL overrides. Empty: events disabled.
	URL string `yaml:"url"`
	// Replicas for streams a service creates (1 on a single server, 3 on a cluster).
	Replicas int `yaml:"replicas"`
	// The service's NATS identity (rev. 2, SPEC §7 "Who may write"): at most
	// one of User with PasswordEnv, NKeySeedFile, or CredsFile (NATS_CREDS
	// overrides CredsFile).
	User         string `yaml:"user"`
	PasswordEnv  string `yaml:"password_env"` // names the variable holding User's password
	Password     Secret `yaml:"-"`            // read from PasswordEnv by the service that connects
	NKeySeedFile string `yaml:"nkey_seed_file"`
	CredsFile    string `yaml:"creds_file"`
	// TLS to the NATS server (a tls:// URL also turns it on).
	TLS NATSTLS `yaml:"tls"`
	// APIPrefix is the subject prefix under which the service reaches the
	// JetStream API (rev. 4): empty for $JS.API, the streams in the
	// service's own account (a plain single-account server);
	// JS.graygate.API on infra/nats, whose streams live in an account of
	// their own that each service's account imports (SPEC §11 rev. 4).
	// Bucket writes then travel as <api_prefix>.$KV.<bucket>.<key>.
	APIPrefix string `yaml:"api_prefix"`
	// RolloutSigners (rev. 4, SPEC §7 "Signed rollout events") lists per
	// actor kind the public nkeys allowed to sign its rollout events (the
	// analyzer's also sign heartbeats). Empty: rollout events are
	// unsigned and accepted as in rev. 3, and every service warns at start.
	RolloutSigners RolloutSigners `yaml:"rollout_signers"`
}

// RolloutSigners is `nats.rollout_signers`: public nkeys (U…) per actor.
type RolloutSigners struct {
	Analyzer []string `yaml:"analyzer"`
	Admin    []string `yaml:"admin"`
	Config   []string `yaml:"config"`
}

// Empty reports whether no signer is listed.
func (s RolloutSigners) Empty() bool {
	return len(s.Analyzer) == 0 && len(s.Admin) == 0 && len(s.Config) == 0
}

// NATSTLS is `nats.tls`: a CA to trust and an optional client certificate.
type NATSTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Postgres is the `postgres` section.
type Postgres struct {
	// URL is a libpq connection string; DATABASE_URL overrides. Redacted when printed.
	URL Secret `yaml:"url"`
}

// Gateway is the `gateway` section.
type Gateway struct {
	Listen            string        `yaml:"listen"`              // client traffic, default 127.0.0.1:8080
	AdminListen       string        `yaml:"admin_listen"`        // /metrics, /healthz, /readyz, /admin/*; default 127.0.0.1:8081
	MaxBodyBytes      Size          `yaml:"max_body_bytes"`      // default 8MiB
	MaxToolSteps      int           `yaml:"max_tool_steps"`      // default 8; 0 disables
	SpoolDir          string        `yaml:"spool_dir"`           // default .data/spool
	SpoolMaxBytes     Size          `yaml:"spool_max_bytes"`     // default 1GiB
	SampleMaxBytes    Size          `yaml:"sample_max_bytes"`    // default 256KiB
	AdminToken        Secret        `yaml:"admin_token"`         // GRAYGATE_ADMIN_TOKEN overrides; empty: /admin/* answers 403
	ClientTokensEnv   string        `yaml:"client_tokens_env"`   // name of an env var with comma-separated bearer tokens
	ClientTokens      []Secret      `yaml:"-"`                   // read from ClientTokensEnv at load
	RolloutStaleAfter time.Duration `yaml:"rollout_stale_after"` // default 60s
	// RedactSamples, when true, redacts failed gray payloads before they
	// are published: JSON keeps its keys and shape, string values become
	// "[redacted]" and numbers 0; anything else becomes a size marker.
	// Default false. Beyond SPEC §2.
	RedactSamples bool `yaml:"redact_samples"`

	// Rev. 2 (SPEC §2, §6.1, §7, §11).

	// ForceTokensEnv names the variable with the bearer tokens that may use
	// a rollout force header (default GRAYGATE_FORCE_TOKENS).
	ForceTokensEnv string   `yaml:"force_tokens_env"`
	ForceTokens    []Secret `yaml:"-"` // read from ForceTokensEnv by the gateway
	// AllowUnauthenticated must be true to serve /v1/* on a non-loopback
	// listen address without client tokens.
	AllowUnauthenticated bool `yaml:"allow_unauthenticated"`
	// MaxClientConnections bounds open client connections (default 10000).
	MaxClientConnections int `yaml:"max_client_connections"`
	// MaxConnectionsPerSource bounds the open client connections of one
	// remote IP address (SPEC §11, rev. 3); past it a new connection from
	// that address is closed at accept, like one past
	// MaxClientConnections. Default 0: no per-source limit, the setting
	// behind an ingress or load balancer, where every client shares its
	// address.
	MaxConnectionsPerSource int `yaml:"max_connections_per_source"`
	// RequestLog is RequestLogAll, RequestLogGray (default) or RequestLogOff.
	RequestLog string `yaml:"request_log"`
	// StatsInterval is how often per-arm statistics are published (default 1s).
	StatsInterval time.Duration `yaml:"stats_interval"`
	// Listener timeouts: ReadTimeout (default 60s) for a whole request,
	// WriteTimeout (default 30s) for one write, never a whole stream,
	// IdleTimeout (default 120s) between keep-alive requests.
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	IdleTimeout  time.Duration `yaml:"idle_timeout"`
	// Caps on upstream-fed buffers (SPEC §11): one SSE event (default
	// 1MiB), one tool call's arguments (1MiB), a buffered or observed gray
	// answer or a primary answer the gateway inspects (64MiB).
	MaxSSEEventBytes       Size `yaml:"max_sse_event_bytes"`
	MaxToolArgumentsBytes  Size `yaml:"max_tool_arguments_bytes"`
	MaxBufferedAnswerBytes Size `yaml:"max_buffered_answer_bytes"`

	// Rev. 4 (SPEC §2, §3, §7, §11).

	// AdminTokensEnv names the variable with one admin token per operator,
	// `name=token,…` (default GRAYGATE_ADMIN_TOKENS); a change made with
	// one records the operator's name. Unset or empty: none.
	AdminTokensEnv string          `yaml:"admin_tokens_env"`
	AdminTokens    []OperatorToken `yaml:"-"` // read from AdminTokensEnv by the gateway
	// GrayUnwatchedAfter (default 2m; 0 never): with no valid analyzer
	// heartbeat this long, grays at or below UnwatchedHoldAbove percent are
	// served primary only, until heartbeats have been back for 30 s.
	GrayUnwatchedAfter time.Duration `yaml:"gray_unwatched_after"`
	// UnwatchedHoldAbove (default 10): an unwatched gray above this
	// percentage keeps its share (pulling it onto primary could overload
	// primary); at or below, primary only.
	UnwatchedHoldAbove float64 `yaml:"unwatched_hold_above"`
	// UnwatchedRecoverAfter (default 30s, SPEC §11 rev. 4) is how long
	// heartbeats must have been back before the hold ends. Beyond SPEC §2:
	// tests make it short.
	UnwatchedRecoverAfter time.Duration `yaml:"unwatched_recover_after"`
	// RolloutSigningKeyFile is the nkey seed file that signs this
	// gateway's admin and config rollout events; required when
	// nats.rollout_signers is set.
	RolloutSigningKeyFile string `yaml:"rollout_signing_key_file"`
	RolloutSigningSeed    Secret `yaml:"-"` // read from RolloutSigningKeyFile by the gateway
}

// OperatorToken is one entry of gateway.admin_tokens_env: an operator's
// name ([a-z0-9_.-]{1,32}) and their admin token.
type OperatorToken struct {
	Name  string
	Token Secret
}

// Request log levels (gateway.request_log, SPEC §7 "Which requests are logged").
const (
	RequestLogAll  = "all"
	RequestLogGray = "gray"
	RequestLogOff  = "off"
)

// Conflict policies of the sampling contract.
const (
	ConflictReject = "reject"
	ConflictAllow  = "allow"
)

// SamplingContract is the `sampling_contract` section (SPEC §4).
type SamplingContract struct {
	// Conflict is ConflictReject (default) or ConflictAllow.
	Conflict string `yaml:"conflict"`
	// Params by governed parameter name (temperature, top_p, top_k, min_p,
	// repetition_penalty, frequency_penalty, presence_penalty, n).
	Params map[string]ParamRule `yaml:"params"`
}

// ParamRule is one governed parameter: a pinned value (Pinned true, Value set)
// or an inclusive band [Min, Max] with an optional Default to inject.
// For the integer parameters (top_k, n) every number is whole.
//
// IntValue, IntMin, IntMax and IntDefault hold the same numbers exactly for
// the integer parameters (a float64 rounds integers past 2^53).
type ParamRule struct {
	Pinned     bool
	Value      float64
	Min, Max   float64
	HasDefault bool
	Default    float64

	IntValue, IntMin, IntMax, IntDefault int64
}

// Routing is the `routing` section.
type Routing struct {
	Signals Signals `yaml:"signals"`
	Routes  []Route `yaml:"routes"`
}

// Signals holds request classifiers.
type Signals struct {
	// Context bands in config order (SPEC §5).
	Context []ContextBand `yaml:"context"`
}

// ContextBand matches requests whose estimated tokens lie in [MinTokens, MaxTokens].
type ContextBand struct {
	Name        string `yaml:"name"`
	MinTokens   Tokens `yaml:"min_tokens"` // unset means 0
	MaxTokens   Tokens `yaml:"max_tokens"` // unset means open-ended
	Description string `yaml:"description"`
}

// Tokens is a token-count bound read with the two-step rule of SPEC §5.2.
type Tokens struct {
	Set   bool
	Value int64
}

// Route maps a client `model` value to deployments in order of preference.
type Route struct {
	Model      string      `yaml:"model"`
	Candidates []Candidate `yaml:"candidates"`
}

// Candidate is one deployment of a route, optionally conditioned on bands.
type Candidate struct {
	Deployment string   `yaml:"deployment"`
	Context    []string `yaml:"context"` // eligible only when one of these bands matched; empty: always
}

// Deployment is one entry of `deployments`.
type Deployment struct {
	Name          string    `yaml:"-"`
	ContextWindow int64     `yaml:"context_window"` // 0: unknown, never filters
	Primary       Upstream  `yaml:"primary"`
	Gray          *Upstream `yaml:"gray"`    // nil: no gray arm
	Rollout       Rollout   `yaml:"rollout"` // meaningful only with Gray
}

// Upstream is an OpenAI-compatible server.
type Upstream struct {
	URL               string        `yaml:"url"`   // base URL up to the API version, as an SDK's base_url (no path: /v1); a gray without url uses primary's
	Model             string        `yaml:"model"` // model name the upstream serves
	APIKeyEnv         string        `yaml:"api_key_env"`
	APIKey            Secret        `yaml:"-"`                   // read from APIKeyEnv at load
	Timeout           time.Duration `yaml:"timeout"`             // until response headers; default 60s
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout"` // longest gap between body reads; default 60s
	// MaxConnections bounds the connections the gateway keeps open to the
	// upstream, in use and idle (SPEC §2 rev. 3; default 0: no limit). A
	// request that finds them all busy waits for one at most
	// connect_timeout (and never past its header deadline or a gray
	// attempt's rollout timeout), then gets 503 upstream_busy.
	MaxConnections int `yaml:"max_connections"`

	// Rev. 2 (SPEC §2, §3, §6.6).

	// ConnectTimeout bounds TCP + TLS and the wait for a free connection
	// under max_connections (default 5s, DefaultConnectTimeout); MaxDuration a whole
	// answer, buffered or streamed (default 10m).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	MaxDuration    time.Duration `yaml:"max_duration"`
	// TLS for https:// upstreams.
	TLS UpstreamTLS `yaml:"tls"`
	// Prompt is the system prompt this arm sends; nil: the client's own.
	Prompt *Prompt `yaml:"prompt"`
	// Params are sampling values this arm sets (governed keys of SPEC §4),
	// injected or replacing the client's; each satisfies the contract.
	Params ArmParams `yaml:"params"`
	// Fingerprint is the arm's fingerprint (see Fingerprint), computed at
	// load from its model, URL, prompt and params (a gray without url:
	// primary's URL and model); statistics carry it.
	Fingerprint string `yaml:"-"`

	// Rev. 4 (SPEC §6.7): a pool of replicas instead of one url (pool.go).

	Endpoints     []string       `yaml:"endpoints"`
	Discovery     *Discovery     `yaml:"discovery"`
	Revision      string         `yaml:"revision"`
	Balance       string         `yaml:"balance"`
	Prefix        PrefixBalance  `yaml:"prefix"`
	EngineMetrics *EngineMetrics `yaml:"engine_metrics"`
	Health        *HealthCheck   `yaml:"health"`
	Outlier       Outlier        `yaml:"outlier"`
	RetryBudget   float64        `yaml:"retry_budget"`
}

// ArmParams are an arm's sampling values by governed parameter name.
type ArmParams map[string]ArmParam

// ArmParam is one value; Int holds it exactly for top_k and n.
type ArmParam struct {
	Value float64
	Int   int64
}

// UpstreamTLS is an upstream's `tls` block.
type UpstreamTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	// CAPEM, CertPEM and KeyPEM are the files' contents, read and
	// checked at load.
	CAPEM, CertPEM, KeyPEM []byte `yaml:"-"`
}

// Prompt modes (SPEC §6.6).
const (
	PromptReplace = "replace"
	PromptPrepend = "prepend"
)

// Prompt is an arm's system prompt (SPEC §6.6).
type Prompt struct {
	Version    string `yaml:"version"`
	SystemFile string `yaml:"system_file"`
	Mode       string `yaml:"mode"` // replace (default) | prepend
	// Text is the file's content, read by the gateway at load; Hash its
	// hex SHA-256.
	Text []byte `yaml:"-"`
	Hash string `yaml:"-"`
}

// Rollout modes, sticky keys, schema targets and stream validation modes.
const (
	ModeCanary = "canary"
	ModeShadow = "shadow"

	TargetContent = "content"
	TargetBody    = "body"

	StreamBuffer  = "buffer"
	StreamObserve = "observe"
)

// Rollout is a deployment's gray release policy.
type Rollout struct {
	Mode              string        `yaml:"mode"`               // canary (default) | shadow
	Percentage        float64       `yaml:"percentage"`         // 0–100, at most two decimals; default 0
	StickyKey         string        `yaml:"sticky_key"`         // user (default) | header:NAME | token | none
	ForceHeader       string        `yaml:"force_header"`       // default X-Gray-Rollout
	Timeout           time.Duration `yaml:"timeout"`            // whole gray attempt; default 2500ms
	ShadowConcurrency int           `yaml:"shadow_concurrency"` // default 32
	ResponseSchema    string        `yaml:"response_schema"`    // path to a JSON Schema file; empty: JSON validity only
	SchemaTarget      string        `yaml:"schema_target"`      // content (default) | body
	StreamValidation  string        `yaml:"stream_validation"`  // buffer (default) | observe

	// SchemaJSON is the response schema file's content, read and checked at
	// load (a JSON object, draft-04/06/07, local $refs only, compilable);
	// nil when ResponseSchema is empty.
	SchemaJSON []byte `yaml:"-"`
	// SchemaPath is the absolute path ResponseSchema resolved to: relative to
	// the configuration file's directory first, else to the working directory.
	SchemaPath string `yaml:"-"`
}

// Analyzer is the `analyzer` section (SPEC §9).
type Analyzer struct {
	Listen      string        `yaml:"listen"`       // default 127.0.0.1:8083
	Interval    time.Duration `yaml:"interval"`     // default 5s
	Window      time.Duration `yaml:"window"`       // default 5m
	MinRequests int           `yaml:"min_requests"` // default 50
	// Confidence of every gate's test, one-sided and valid under continuous
	// monitoring (default 0.99; rev. 2, SPEC §9).
	Confidence float64 `yaml:"confidence"`
	// Listener timeouts (defaults 60s, 30s, 120s; SPEC §11).
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	IdleTimeout  time.Duration `yaml:"idle_timeout"`
	// LeaseTTL (rev. 4, default 10s) times the lease (SPEC §11): renewed
	// every LeaseTTL/3, acted on within LeaseTTL/2 of a renewal, taken over
	// after its revision stood still for LeaseTTL.
	LeaseTTL  time.Duration `yaml:"lease_ttl"`
	Gates     Gates         `yaml:"gates"`
	Promotion *Promotion    `yaml:"promotion"` // nil: no progressive rollout
	// SigningKeyFile (rev. 4) is the nkey seed file that signs the
	// analyzer's rollout events and heartbeats (SPEC §7, §11); required
	// when nats.rollout_signers is set.
	SigningKeyFile string `yaml:"signing_key_file"`
	SigningSeed    Secret `yaml:"-"` // read from SigningKeyFile by the analyzer
	// SpoolDir holds the evaluation events the event log has not stored
	// yet (a stream without a leader, NATS away), on disk so that a crash
	// loses none (SPEC §11 rev. 4: "spooled like the gateway's events");
	// each running analyzer takes a numbered slot below it. Default
	// .data/analyzer-spool, bounded by SpoolMaxBytes (default 256MiB).
	SpoolDir      string `yaml:"spool_dir"`
	SpoolMaxBytes Size   `yaml:"spool_max_bytes"`
}

// Gates are the thresholds of the hard metrics (SPEC §9).
type Gates struct {
	TokenInflationMax    float64       `yaml:"token_inflation_max"`     // default 0.30
	SchemaFailureRateMax float64       `yaml:"schema_failure_rate_max"` // default 0
	TTFTP99Max           time.Duration `yaml:"ttft_p99_max"`            // default 3s
	TTFTP99RatioMax      float64       `yaml:"ttft_p99_ratio_max"`      // default 1.5
	LatencyP99RatioMax   float64       `yaml:"latency_p99_ratio_max"`   // default 1.5
	ToolLoopRatioMax     float64       `yaml:"tool_loop_ratio_max"`     // default 0.05: points of gray's loop share above primary's
	GrayErrorRateMax     float64       `yaml:"gray_error_rate_max"`     // default 0.05: points of gray's error share above primary's
	// LatencyP99MinIncrease and TTFTP99MinIncrease (rev. 4, default 50ms)
	// are the floors of the ratio gates: a ratio gate fails only when gray
	// is also slower by at least this much at the quantile that failed
	// (SPEC §9 "Floors"); 0 turns the floor off.
	LatencyP99MinIncrease time.Duration `yaml:"latency_p99_min_increase"`
	TTFTP99MinIncrease    time.Duration `yaml:"ttft_p99_min_increase"`
}

// Promotion advances the gray percentage along Steps after Hold with all gates passing.
type Promotion struct {
	Steps []float64     `yaml:"steps"`
	Hold  time.Duration `yaml:"hold"`
	// MinSoak (rev. 3, default 24h) is how long the epoch must have run
	// before the step to 100 %, with the percentage never below
	// MinPercentage (default 1) in it: the seed's "≥ 1 % for ≥ 24 h".
	MinSoak       time.Duration `yaml:"min_soak"`
	MinPercentage float64       `yaml:"min_percentage"`
}

// StepAbove returns the first step above percentage: where a promotion
// from percentage goes (SPEC §9 rev. 3), for the analyzer and for the
// console's "promote to the next step" alike. ok is false at or above the
// last step, and for a nil p.
func (p *Promotion) StepAbove(percentage float64) (step float64, ok bool) {
	if p == nil {
		return 0, false
	}
	for _, s := range p.Steps {
		if s > percentage+1e-9 {
			return s, true
		}
	}
	return 0, false
}

// Collector is the `collector` section (SPEC §8).
type Collector struct {
	Listen          string        `yaml:"listen"`            // default 127.0.0.1:8082
	APIToken        Secret        `yaml:"api_token"`         // GRAYGATE_API_TOKEN overrides; empty: /v1/* answers 403
	BatchSize       int           `yaml:"batch_size"`        // default 500
	FlushInterval   time.Duration `yaml:"flush_interval"`    // default 200ms
	Retention       time.Duration `yaml:"retention"`         // default 720h
	MaxPayloadBytes Size          `yaml:"max_payload_bytes"` // default 256KiB
	// Listener timeouts (defaults 60s, 30s, 120s; SPEC §11).
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	IdleTimeout  time.Duration `yaml:"idle_timeout"`
	// Console configures the operator console's sessions and actions
	// (SPEC §8 rev. 4).
	Console Console `yaml:"console"`
}

// Console is `collector.console` (SPEC §8 rev. 4): where the console sends
// an operator's actions, the key that seals their admin tokens in the
// session store, and the proxies whose X-Forwarded-For it believes.
type Console struct {
	// AdminURL is the gateway admin API's base URL (http or https, no
	// path beyond a prefix, no credentials, query or fragment), as
	// `gateway rollout --admin-url` takes it. Empty: no operator sign-in
	// and no actions; the console is read-only.
	AdminURL string `yaml:"admin_url"`
	// SessionKeyFile holds the 32-byte key (raw, or 64 hex digits) that
	// seals operators' admin tokens with AES-GCM. It must not be
	// readable by group or others. Empty: operators cannot sign in.
	SessionKeyFile string `yaml:"session_key_file"`
	// TrustedProxies are the IPs and CIDRs of the proxies in front of the
	// collector: only from them is X-Forwarded-For read for the login
	// limits' source, and X-Forwarded-Proto for TLS.
	TrustedProxies []string `yaml:"trusted_proxies"`

	SessionKey Secret         `yaml:"-"` // read from SessionKeyFile by the collector
	Proxies    []netip.Prefix `yaml:"-"` // TrustedProxies parsed
}

// Size is a byte count written as `8MiB`, `256KiB`, `1GiB` or a plain integer.
type Size int64

// Secret is a string that prints redacted.
type Secret string

// String returns a redaction marker, never the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

// GoString keeps %#v from printing the secret.
func (s Secret) GoString() string { return `config.Secret("` + s.String() + `")` }

// MarshalText redacts the secret in JSON, YAML and any other text encoding,
// so that dumping a loaded configuration never leaks it.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret's value for use (never for logging).
func (s Secret) Reveal() string { return string(s) }
