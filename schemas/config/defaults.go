package config

import "time"

// Defaults of values an operator rarely changes (SPEC §2). The decoder fills
// each struct with its defaults before reading the file into it, so a key the
// file omits keeps its default and an explicit zero (max_tool_steps: 0, or
// nats.url: "") stays as written.
const (
	DefaultNATSURL         = "nats://127.0.0.1:4222"
	DefaultPostgresURL     = "postgres://postgres@127.0.0.1:5432/graygate?sslmode=disable"
	DefaultClientTokensEnv = "GRAYGATE_CLIENT_TOKENS"
	DefaultForceHeader     = "X-Gray-Rollout"
	StickyUser             = "user"
	StickyNone             = "none"
	// StickyToken keys the arm by the client's bearer token (rev. 2).
	StickyToken           = "token"
	DefaultForceTokensEnv = "GRAYGATE_FORCE_TOKENS"
	// DefaultAdminTokensEnv holds the per-operator admin tokens (rev. 4).
	DefaultAdminTokensEnv = "GRAYGATE_ADMIN_TOKENS"
	// StickyHeaderPrefix starts a sticky key that names a request header:
	// `header:X-Tenant`.
	StickyHeaderPrefix = "header:"
	// DefaultMaxConnections bounds the connections open to one upstream
	// (upstream key max_connections, SPEC §2 rev. 3): 0, no limit. A
	// limit queued streams behind each other (issue 25: at 2,000
	// concurrent streams and the former 1024, TTFT p99 was 33 s).
	DefaultMaxConnections = 0
	// DefaultConnectTimeout bounds TCP + TLS to an upstream, and the wait
	// for a free connection under max_connections. 5 s survives two lost
	// SYNs: a busy upstream whose accept queue overflows drops the SYN,
	// and Linux sends it again after 1 s and then 3 s (initial RTO 1 s,
	// doubling), so the former 1 s failed on the first drop (issue 25:
	// 502 "connect to upstream: i/o timeout" under CPU saturation) where
	// nginx (proxy_connect_timeout 60 s) only slowed down. It stays well
	// under the 60 s header timeout, which it never exceeds.
	DefaultConnectTimeout = 5 * time.Second
)

func (c *Config) setDefaults() {
	c.NATS.setDefaults()
	c.Postgres.setDefaults()
	c.Gateway.setDefaults()
	c.Analyzer.setDefaults()
	c.Collector.setDefaults()
	c.Deployments = map[string]*Deployment{}
}

func (n *NATS) setDefaults() {
	n.URL = DefaultNATSURL
	n.Replicas = 1
}

func (p *Postgres) setDefaults() {
	p.URL = DefaultPostgresURL
}

func (g *Gateway) setDefaults() {
	g.Listen = "127.0.0.1:8080"
	g.AdminListen = "127.0.0.1:8081"
	g.MaxBodyBytes = 8 << 20
	g.MaxToolSteps = 8
	g.SpoolDir = ".data/spool"
	g.SpoolMaxBytes = 1 << 30
	g.SampleMaxBytes = 256 << 10
	g.ClientTokensEnv = DefaultClientTokensEnv
	g.RolloutStaleAfter = 60 * time.Second
	g.ForceTokensEnv = DefaultForceTokensEnv
	g.MaxClientConnections = 10000
	g.RequestLog = RequestLogGray
	g.StatsInterval = time.Second
	g.ReadTimeout = 60 * time.Second
	g.WriteTimeout = 30 * time.Second
	g.IdleTimeout = 120 * time.Second
	g.MaxSSEEventBytes = 1 << 20
	g.MaxToolArgumentsBytes = 1 << 20
	g.MaxBufferedAnswerBytes = 64 << 20
	g.AdminTokensEnv = DefaultAdminTokensEnv
	g.GrayUnwatchedAfter = 2 * time.Minute
	g.UnwatchedHoldAbove = 10
	g.UnwatchedRecoverAfter = 30 * time.Second
}

func (s *SamplingContract) setDefaults() {
	s.Conflict = ConflictReject
}

func (d *Deployment) setDefaults() {
	d.Primary.setDefaults()
	d.Rollout.setDefaults()
}

func (u *Upstream) setDefaults() {
	u.Timeout = 60 * time.Second
	u.StreamIdleTimeout = 60 * time.Second
	u.MaxConnections = DefaultMaxConnections
	u.ConnectTimeout = DefaultConnectTimeout
	u.MaxDuration = 10 * time.Minute
	u.Balance = BalanceLeastLoaded
	u.Prefix.setDefaults()
	u.Outlier.setDefaults()
	u.RetryBudget = 0.2
}

func (r *Rollout) setDefaults() {
	r.Mode = ModeCanary
	r.StickyKey = StickyUser
	r.ForceHeader = DefaultForceHeader
	r.Timeout = 2500 * time.Millisecond
	r.ShadowConcurrency = 32
	r.SchemaTarget = TargetContent
	r.StreamValidation = StreamBuffer
}

func (a *Analyzer) setDefaults() {
	a.Listen = "127.0.0.1:8083"
	a.Interval = 5 * time.Second
	a.Window = 5 * time.Minute
	a.MinRequests = 50
	a.Confidence = 0.99
	a.ReadTimeout = 60 * time.Second
	a.WriteTimeout = 30 * time.Second
	a.IdleTimeout = 120 * time.Second
	a.LeaseTTL = 10 * time.Second
	a.SpoolDir = ".data/analyzer-spool"
	a.SpoolMaxBytes = 256 << 20
	a.Gates = Gates{
		TokenInflationMax:    0.30,
		SchemaFailureRateMax: 0,
		TTFTP99Max:           3 * time.Second,
		TTFTP99RatioMax:      1.5,
		LatencyP99RatioMax:   1.5,
		ToolLoopRatioMax:     0.05,
		GrayErrorRateMax:     0.05,

		LatencyP99MinIncrease: 50 * time.Millisecond,
		TTFTP99MinIncrease:    50 * time.Millisecond,
	}
}

func (c *Collector) setDefaults() {
	c.Listen = "127.0.0.1:8082"
	c.BatchSize = 500
	c.FlushInterval = 200 * time.Millisecond
	c.Retention = 720 * time.Hour
	c.MaxPayloadBytes = 256 << 10
	c.ReadTimeout = 60 * time.Second
	c.WriteTimeout = 30 * time.Second
	c.IdleTimeout = 120 * time.Second
}

// setDefaults fills a promotion block with SPEC §2's values: a block that
// names none of them (`promotion: {}`) promotes along them.
func (p *Promotion) setDefaults() {
	p.Steps = []float64{1, 2, 5, 10, 25, 50, 100}
	p.Hold = 10 * time.Minute
	p.MinSoak = 24 * time.Hour
	p.MinPercentage = 1
}
