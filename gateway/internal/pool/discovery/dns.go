// Package discovery finds the replicas of a pool (SPEC §6.7 "Membership"):
// the A and AAAA records of a DNS name, re-resolved every refresh, as the
// base URLs the balancer sends to. A Kubernetes headless Service gives one
// record per ready pod, so the set follows the pool as it scales.
//
// A resolution that fails or finds no address keeps the last known set:
// a DNS outage must not empty a pool that still serves. It is counted
// every time, and logged once per change of state (ok → failing warns,
// failing → ok informs), so a long outage does not flood the log.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Options configure a DNS. Name, Port and Scheme are required; zero
// values of the others take the defaults.
type Options struct {
	// Name is the DNS name whose A and AAAA records are the replicas
	// (discovery.dns), e.g. vllm-qwen.serving.svc.cluster.local.
	Name string
	// Port is every replica's port (discovery.port), 1–65535.
	Port int
	// Scheme is "http" or "https" (discovery.scheme).
	Scheme string
	// Refresh is the time between two resolutions (discovery.refresh);
	// default 5s.
	Refresh time.Duration
	// Timeout bounds one resolution (both record types); default
	// Refresh, so resolutions never pile up.
	Timeout time.Duration
	// Resolver looks the name up; default net.DefaultResolver. Tests
	// point one at their own server with PreferGo and Dial.
	Resolver *net.Resolver
	// Log receives the state changes (warn on failing, info on recovery
	// and on a new member set); nil discards.
	Log *slog.Logger
	// OnChange receives the new member set — sorted, without duplicates,
	// never empty — each time it differs from the last one reported. It
	// is called by the goroutine that resolved, one call at a time, and
	// must not call Resolve. The slice is the callee's.
	OnChange func(members []string)
	// OnError is called once for every resolution that failed or found
	// no address (the caller counts graygate_discovery_errors_total);
	// nil ignores. Same calling rules as OnChange.
	OnError func(err error)
}

// DNS keeps one pool's member set from a DNS name. Create it with New;
// Resolve and Run may be called from any goroutine.
type DNS struct {
	name     string
	port     uint16
	scheme   string
	refresh  time.Duration
	timeout  time.Duration
	resolver *net.Resolver
	log      *slog.Logger
	onChange func([]string)
	onError  func(error)

	resolving sync.Mutex // held for a whole Resolve: one at a time, reported in order
	failing   bool       // the last resolution failed; under resolving

	mu      sync.Mutex // guards members; held only to read or swap it
	members []string   // last known set; nil before the first success
}

// DefaultRefresh is the time between two resolutions when Options.Refresh
// is zero.
const DefaultRefresh = 5 * time.Second

// New returns a DNS for opts, or every problem with opts.
func New(opts Options) (*DNS, error) {
	var errs []error
	if opts.Name == "" {
		errs = append(errs, errors.New("discovery.dns: empty name"))
	}
	if opts.Port < 1 || opts.Port > 65535 {
		errs = append(errs, fmt.Errorf("discovery.port: %d is not in 1–65535", opts.Port))
	}
	if opts.Scheme != "http" && opts.Scheme != "https" {
		errs = append(errs, fmt.Errorf("discovery.scheme: %q is neither http nor https", opts.Scheme))
	}
	if opts.Refresh < 0 {
		errs = append(errs, fmt.Errorf("discovery.refresh: %v is negative", opts.Refresh))
	}
	if opts.Timeout < 0 {
		errs = append(errs, fmt.Errorf("discovery timeout: %v is negative", opts.Timeout))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Timeout == 0 {
		opts.Timeout = opts.Refresh
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &DNS{
		name: opts.Name, port: uint16(opts.Port), scheme: opts.Scheme,
		refresh: opts.Refresh, timeout: opts.Timeout, resolver: opts.Resolver,
		log: opts.Log.With("dns", opts.Name), onChange: opts.OnChange, onError: opts.OnError,
	}, nil
}

// Members returns the last known set (nil before the first successful
// resolution) without waiting for a resolution under way. The slice is
// the caller's.
func (d *DNS) Members() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.members)
}

// Resolve resolves the name once, now, and returns the member set that
// holds afterwards: the new one, or — when the resolution failed or found
// no address, which it also returns as the error — the last known one
// (nil if there never was one). It reports a change to OnChange and a
// failure to OnError and the log, as every resolution of Run does; the
// gateway calls it once before serving so it starts with a member set. It
// blocks for at most the resolution timeout. A resolution cut short by
// ctx's cancellation (the pool stopping) is neither counted nor logged;
// one that ctx's deadline ended (the first, bounded by refresh) is a
// failure like any other.
func (d *DNS) Resolve(ctx context.Context) ([]string, error) {
	d.resolving.Lock()
	defer d.resolving.Unlock()
	known := d.Members()
	members, err := d.lookup(ctx)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return known, err
		}
		if !d.failing {
			d.failing = true
			d.log.Warn("discovery: resolution failed; keeping the last known members",
				"members", len(known), "err", err)
		}
		if d.onError != nil {
			d.onError(err)
		}
		return known, err
	}
	if d.failing {
		d.failing = false
		d.log.Info("discovery: resolution recovered", "members", len(members))
	}
	if !slices.Equal(members, known) {
		added, removed := diff(known, members)
		d.mu.Lock()
		d.members = members
		d.mu.Unlock()
		d.log.Info("discovery: members changed", "members", len(members), "added", added, "removed", removed)
		if d.onChange != nil {
			d.onChange(slices.Clone(members))
		}
	}
	return slices.Clone(members), nil
}

// Run resolves the name now and then every refresh until ctx ends, and
// returns nil then. Failures are reported as Resolve reports them; they
// never end Run.
func (d *DNS) Run(ctx context.Context) error {
	ticker := time.NewTicker(d.refresh)
	defer ticker.Stop()
	for {
		_, _ = d.Resolve(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// lookup returns the sorted member URLs of the name's A and AAAA records.
func (d *DNS) lookup(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	addrs, err := d.resolver.LookupNetIP(ctx, "ip", d.name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", d.name, err)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap().WithZone("")
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	members := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() || a.IsUnspecified() {
			continue
		}
		members = append(members, d.scheme+"://"+netip.AddrPortFrom(a, d.port).String())
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("resolve %s: %w", d.name, ErrNoAddress)
	}
	return members, nil
}

// diff returns how many members of next are not in prev, and of prev not
// in next.
func diff(prev, next []string) (added, removed int) {
	in := make(map[string]bool, len(prev))
	for _, m := range prev {
		in[m] = true
	}
	for _, m := range next {
		if in[m] {
			delete(in, m)
		} else {
			added++
		}
	}
	return added, len(in)
}
