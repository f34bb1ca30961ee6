package console

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"sync"
	"time"
)

// The login limits (SPEC §8 rev. 4). A wrong token is answered after
// failDelay, on a connection handed to a timer (delay.go), and its
// source and its token prefix are refused (429 with Retry-After) for the
// same failDelay: a client that waits for its answers guesses once a
// second, and one that does not is refused; the refusal is a timestamp
// in a map, not a sleeping goroutine, so a flood of wrong tokens holds
// nothing but bounded map entries. Over a minute at most
// maxFailures wrong tokens count per source and per token prefix; the
// next attempt is refused until the oldest of them is a minute old.
// Refused attempts are not checked against any token. One attempt per
// source and per token prefix is checked at a time (another is refused
// for failDelay while it is): otherwise attempts sent together would all
// pass allow before the first failure is recorded, past the minute's
// limit.
const (
	failDelay   = time.Second
	maxFailures = 5
	failWindow  = time.Minute
	// maxLimitEntries caps each of the limiter's maps (sources,
	// prefixes). When one is full of live entries, an attempt from a
	// source or with a prefix it does not hold is refused: the limits
	// fail closed rather than forget a guesser.
	maxLimitEntries = 10000
	// tokenPrefixBytes is how much of a token keys its prefix's limit;
	// the map holds a hash of it, never token bytes.
	tokenPrefixBytes = 8
	// sweepEvery bounds how often a full map is swept of dead entries.
	sweepEvery = time.Second
)

// failures is one key's recent wrong tokens.
type failures struct {
	at      [maxFailures]time.Time // ring: the newest maxFailures failures
	n       int                    // failures recorded (at most maxFailures)
	next    int                    // ring position of the next failure
	until   time.Time              // refused before this
	pending int                    // attempts allowed and not yet ended (0 or 1)
}

// record adds a failure at now and moves until.
func (f *failures) record(now time.Time) {
	f.at[f.next] = now
	f.next = (f.next + 1) % maxFailures
	if f.n < maxFailures {
		f.n++
	}
	f.until = now.Add(failDelay)
	if f.n == maxFailures {
		// The ring is full: its oldest entry is at next.
		if oldest := f.at[f.next]; now.Sub(oldest) < failWindow {
			f.until = oldest.Add(failWindow)
		}
	}
}

// dead reports whether f no longer refuses anything nor counts toward the
// minute's limit.
func (f *failures) dead(now time.Time) bool {
	newest := f.at[(f.next+maxFailures-1)%maxFailures]
	return f.pending == 0 && !now.Before(f.until) && now.Sub(newest) >= failWindow
}

// limitMap is one of the limiter's maps with its cap.
type limitMap struct {
	m         map[string]*failures
	lastSweep time.Time
}

// room makes room for a new key: it sweeps dead entries (at most every
// sweepEvery) and reports whether the map is below its cap.
func (l *limitMap) room(now time.Time) bool {
	if len(l.m) < maxLimitEntries {
		return true
	}
	if now.Sub(l.lastSweep) >= sweepEvery {
		l.lastSweep = now
		for k, f := range l.m {
			if f.dead(now) {
				delete(l.m, k)
			}
		}
	}
	return len(l.m) < maxLimitEntries
}

// limiter holds the login limits per source and per token prefix.
type limiter struct {
	mu       sync.Mutex
	sources  limitMap
	prefixes limitMap
}

func newLimiter() *limiter {
	return &limiter{sources: limitMap{m: map[string]*failures{}}, prefixes: limitMap{m: map[string]*failures{}}}
}

// allow reports whether an attempt from source with a token of prefix key
// may be checked now, or how long to wait. An allowed attempt is in
// flight until failed or passed ends it.
func (l *limiter) allow(source, prefix string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	keys := l.keys(source, prefix)
	var fs [2]*failures
	for i, k := range keys {
		f := k.lm.m[k.key]
		switch {
		case f == nil && !k.lm.room(now):
			// Full of live entries: refuse what it cannot track.
			wait = max(wait, failWindow)
		case f != nil && now.Before(f.until):
			wait = max(wait, f.until.Sub(now))
		case f != nil && f.pending > 0:
			wait = max(wait, failDelay)
		}
		fs[i] = f
	}
	if wait > 0 {
		return wait, false
	}
	for i, k := range keys {
		if fs[i] == nil {
			fs[i] = &failures{}
			k.lm.m[k.key] = fs[i]
		}
		fs[i].pending++
	}
	return 0, true
}

// failed records a wrong token from source with prefix key at now, and
// ends the attempt allow let through, if any.
func (l *limiter) failed(source, prefix string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys(source, prefix) {
		f := k.lm.m[k.key]
		if f == nil {
			if !k.lm.room(now) {
				continue
			}
			f = &failures{}
			k.lm.m[k.key] = f
		}
		f.pending = max(f.pending-1, 0)
		f.record(now)
	}
}

// passed ends an attempt allow let through that was not a wrong token.
func (l *limiter) passed(source, prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys(source, prefix) {
		if f := k.lm.m[k.key]; f != nil {
			f.pending = max(f.pending-1, 0)
		}
	}
}

// limitKey is one of an attempt's two keys with its map.
type limitKey struct {
	lm  *limitMap
	key string
}

func (l *limiter) keys(source, prefix string) [2]limitKey {
	return [2]limitKey{{&l.sources, source}, {&l.prefixes, prefix}}
}

// entries returns the sizes of the limiter's maps (tests).
func (l *limiter) entries() (sources, prefixes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sources.m), len(l.prefixes.m)
}

// prefixKey is the key of a token's prefix: a hash of its first
// tokenPrefixBytes bytes, so the map never holds token bytes.
func prefixKey(token string) string {
	if len(token) > tokenPrefixBytes {
		token = token[:tokenPrefixBytes]
	}
	sum := sha256.Sum256([]byte("graygate-console-prefix/v1\x00" + token))
	return hex.EncodeToString(sum[:16])
}

// sourceKey is the key of a client address: an IPv4 address, or the /64
// an IPv6 address is in (one host usually holds a whole /64).
func sourceKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
