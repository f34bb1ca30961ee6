package config

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// This file holds an upstream's replica-pool keys (SPEC §6.7 rev. 4):
// `endpoints` or `discovery` instead of `url`, how the pool balances,
// checks and ejects its replicas, and how often it retries another.

// Balancing policies (SPEC §6.7).
const (
	BalanceRoundRobin  = "round_robin"
	BalanceLeastLoaded = "least_loaded"
	BalancePrefix      = "prefix"
)

// MaxEndpoints bounds a pool's replicas (static or discovered): replica
// labels of the per-replica metrics are bounded by it.
const MaxEndpoints = 1024

// MaxPrefixBlocks bounds the prefix index's blocks per replica
// (cache_tokens × 4 / block_bytes): 16 Mi blocks, a cache far beyond any
// engine's, so that a configuration cannot make the index's memory
// unbounded.
const MaxPrefixBlocks = 1 << 24

// Discovery finds a pool's replicas in DNS: the A and AAAA records of
// DNS, re-resolved every Refresh (a Kubernetes headless Service has one
// record per ready pod).
type Discovery struct {
	DNS     string        `yaml:"dns"`
	Port    int           `yaml:"port"`
	Scheme  string        `yaml:"scheme"` // http | https
	Refresh time.Duration `yaml:"refresh"`
}

// PrefixBalance tunes the `prefix` policy.
type PrefixBalance struct {
	// BlockBytes is the size of a hashed block of what the engine sees.
	BlockBytes int `yaml:"block_bytes"`
	// MinMatch is the least share of a request's blocks a replica must
	// hold for the request to follow its prefix.
	MinMatch float64 `yaml:"min_match"`
	// LoadFactor bounds the load of the replica a prefix chooses: at
	// most LoadFactor × the pool's mean load + 1.
	LoadFactor float64 `yaml:"load_factor"`
	// CacheTokens is a replica's prefix cache in tokens (4 bytes each):
	// the per-replica index holds at most that many bytes of blocks.
	CacheTokens int64 `yaml:"cache_tokens"`
	// Share publishes and merges index entries between gateways on core
	// NATS (graygate.balance.<deployment>).
	Share bool `yaml:"share"`
}

// EngineMetrics scrapes each replica's engine gauges (Prometheus text).
type EngineMetrics struct {
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
}

// HealthCheck is the active check of each replica.
type HealthCheck struct {
	Path           string        `yaml:"path"`
	Interval       time.Duration `yaml:"interval"`
	Timeout        time.Duration `yaml:"timeout"`
	UnhealthyAfter int           `yaml:"unhealthy_after"`
	HealthyAfter   int           `yaml:"healthy_after"`
}

// Outlier is passive outlier ejection, always on (Envoy's outlier
// detection): ConsecutiveFailures failed attempts eject a replica for
// Ejection × its ejection count, at most MaxEjection; at most
// MaxEjectedPercent of the pool is ejected at once.
type Outlier struct {
	ConsecutiveFailures int           `yaml:"consecutive_failures"`
	Ejection            time.Duration `yaml:"ejection"`
	MaxEjection         time.Duration `yaml:"max_ejection"`
	MaxEjectedPercent   int           `yaml:"max_ejected_percent"`
}

func (d *Discovery) setDefaults() {
	d.Scheme = "http"
	d.Refresh = 5 * time.Second
}

func (p *PrefixBalance) setDefaults() {
	p.BlockBytes = 256
	p.MinMatch = 0.5
	p.LoadFactor = 1.25
	p.CacheTokens = 1 << 20
}

func (e *EngineMetrics) setDefaults() {
	e.Path = "/metrics"
	e.Interval = 2 * time.Second
}

func (h *HealthCheck) setDefaults() {
	h.Path = "/health"
	h.Interval = 5 * time.Second
	h.Timeout = time.Second
	h.UnhealthyAfter = 2
	h.HealthyAfter = 2
}

func (o *Outlier) setDefaults() {
	o.ConsecutiveFailures = 5
	o.Ejection = 30 * time.Second
	o.MaxEjection = 300 * time.Second
	o.MaxEjectedPercent = 50
}

// IsPool reports whether the upstream names its replicas by endpoints or
// discovery rather than one url.
func (u *Upstream) IsPool() bool { return len(u.Endpoints) > 0 || u.Discovery != nil }

// HasUpstream reports whether the upstream names where to send at all
// (a gray without any uses primary's).
func (u *Upstream) HasUpstream() bool { return u.URL != "" || u.IsPool() }

// validatePool checks the pool keys of an upstream at path p. sources is
// how many of url, endpoints and discovery it sets.
func (d *decoder) validatePool(p string, u *Upstream) {
	if len(u.Endpoints) > MaxEndpoints {
		d.errorf(p+".endpoints", nil, "at most %d endpoints, got %d", MaxEndpoints, len(u.Endpoints))
	}
	seen := make(map[string]int, len(u.Endpoints))
	for i, e := range u.Endpoints {
		ep := indexPath(p+".endpoints", i)
		if why := checkUpstreamURL(e); why != "" {
			d.errorf(ep, nil, "%s", why)
			continue
		}
		host := ReplicaAddr(e)
		if j, dup := seen[host]; dup {
			d.errorf(ep, nil, "the same replica as endpoints[%d] (%s)", j, host)
		}
		seen[host] = i
	}
	if g := u.Discovery; g != nil {
		dp := p + ".discovery"
		if g.DNS == "" {
			d.errorf(dp+".dns", nil, "discovery needs the dns name to resolve")
		} else if !dnsName(g.DNS) || net.ParseIP(g.DNS) != nil {
			d.errorf(dp+".dns", nil, "must be a DNS name (labels of letters, digits, - and _, each 1-63 characters, 253 in all), got %q", g.DNS)
		}
		if g.Port < 1 || g.Port > 65535 {
			d.errorf(dp+".port", nil, "must be a port 1-65535, got %d", g.Port)
		}
		if g.Scheme != "http" && g.Scheme != "https" {
			d.errorf(dp+".scheme", nil, "must be http or https, got %q", g.Scheme)
		}
		d.positiveDuration(dp+".refresh", g.Refresh)
	}
	switch u.Balance {
	case "":
		u.Balance = BalanceLeastLoaded
	case BalanceRoundRobin, BalanceLeastLoaded, BalancePrefix:
	default:
		d.errorf(p+".balance", nil, "must be %s, %s or %s, got %q", BalanceRoundRobin, BalanceLeastLoaded, BalancePrefix, u.Balance)
	}
	pp := p + ".prefix"
	if u.Prefix.BlockBytes < 16 || u.Prefix.BlockBytes > 1<<20 {
		d.errorf(pp+".block_bytes", nil, "must be 16 to 1048576 bytes, got %d", u.Prefix.BlockBytes)
	}
	if !(u.Prefix.MinMatch >= 0 && u.Prefix.MinMatch <= 1) {
		d.errorf(pp+".min_match", nil, "must be a share from 0 to 1, got %v", u.Prefix.MinMatch)
	}
	if !(u.Prefix.LoadFactor >= 1 && u.Prefix.LoadFactor <= 100) {
		d.errorf(pp+".load_factor", nil, "must be from 1 to 100, got %v", u.Prefix.LoadFactor)
	}
	if u.Prefix.CacheTokens < 1 || u.Prefix.CacheTokens > 1<<40 {
		d.errorf(pp+".cache_tokens", nil, "must be 1 to %d tokens, got %d", int64(1)<<40, u.Prefix.CacheTokens)
	} else if u.Balance == BalancePrefix && u.Prefix.BlockBytes >= 16 {
		// The index keeps cache_tokens × 4 / block_bytes blocks a replica
		// (SPEC §6.7): at least one, and not more than MaxPrefixBlocks.
		if n := u.Prefix.CacheTokens * 4 / int64(u.Prefix.BlockBytes); n < 1 || n > MaxPrefixBlocks {
			d.errorf(pp+".cache_tokens", nil, "gives %d blocks of %d bytes (cache_tokens × 4 / block_bytes) a replica; the index keeps 1 to %d",
				n, u.Prefix.BlockBytes, MaxPrefixBlocks)
		}
	}
	if e := u.EngineMetrics; e != nil {
		if e.Path == "" || e.Path[0] != '/' {
			d.errorf(p+".engine_metrics.path", nil, "must be a path starting with /, got %q", e.Path)
		}
		d.positiveDuration(p+".engine_metrics.interval", e.Interval)
	}
	if h := u.Health; h != nil {
		hp := p + ".health"
		if h.Path == "" || h.Path[0] != '/' {
			d.errorf(hp+".path", nil, "must be a path starting with /, got %q", h.Path)
		}
		d.positiveDuration(hp+".interval", h.Interval)
		d.positiveDuration(hp+".timeout", h.Timeout)
		d.atLeastOne(hp+".unhealthy_after", h.UnhealthyAfter)
		d.atLeastOne(hp+".healthy_after", h.HealthyAfter)
	}
	op := p + ".outlier"
	d.atLeastOne(op+".consecutive_failures", u.Outlier.ConsecutiveFailures)
	d.positiveDuration(op+".ejection", u.Outlier.Ejection)
	d.positiveDuration(op+".max_ejection", u.Outlier.MaxEjection)
	if u.Outlier.MaxEjection > 0 && u.Outlier.MaxEjection < u.Outlier.Ejection {
		// Every ejection would silently last max_ejection.
		d.errorf(op+".max_ejection", nil, "must be at least ejection (%v), got %v", u.Outlier.Ejection, u.Outlier.MaxEjection)
	}
	if u.Outlier.MaxEjectedPercent < 0 || u.Outlier.MaxEjectedPercent > 100 {
		d.errorf(op+".max_ejected_percent", nil, "must be 0 to 100, got %d", u.Outlier.MaxEjectedPercent)
	}
	if !(u.RetryBudget >= 0 && u.RetryBudget <= 1) {
		d.errorf(p+".retry_budget", nil, "must be a share from 0 to 1, got %v", u.RetryBudget)
	}
}

// ReplicaAddr is the host:port a base URL dials (a replica's name in
// events, metrics and GET /admin/upstreams); raw itself when it does not
// parse.
func ReplicaAddr(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if u.Port() != "" {
		return u.Host
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	return net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
}

// dnsName reports whether s is a DNS name a resolver can look up: labels
// of letters, digits, '-' and '_' (service names such as _grpc), each 1
// to 63 characters and not beginning or ending with '-', 253 characters
// in all, with an optional final dot.
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
