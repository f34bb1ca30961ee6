package console

import (
	"bytes"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLimiterRing: five wrong tokens a minute per key, a failDelay after
// each; the sixth waits until the oldest is a minute old.
func TestLimiterRing(t *testing.T) {
	l := newLimiter()
	now := fakeTime
	for i := range maxFailures {
		if wait, ok := l.allow("src", "p", now); !ok {
			t.Fatalf("attempt %d refused (wait %v); want allowed", i+1, wait)
		}
		l.failed("src", "p", now)
		if wait, ok := l.allow("src", "p", now); ok || wait != failDelay && i < maxFailures-1 {
			t.Fatalf("right after failure %d: allow = %v, %v; want refused for %v", i+1, wait, ok, failDelay)
		}
		now = now.Add(2 * time.Second)
	}
	// Five failures at 0, 2, 4, 6, 8 s; now is 10 s: refused until 60 s.
	if wait, ok := l.allow("src", "other-prefix", now); ok || wait != 50*time.Second {
		t.Errorf("after five failures: allow = %v, %v; want refused for 50s", wait, ok)
	}
	if wait, ok := l.allow("other-source", "p", now); ok || wait != 50*time.Second {
		t.Errorf("the prefix after five failures: allow = %v, %v; want refused for 50s", wait, ok)
	}
	if _, ok := l.allow("other-source", "other-prefix", now); !ok {
		t.Error("an unrelated source and prefix are refused")
	}
	l.passed("other-source", "other-prefix")
	now = fakeTime.Add(failWindow)
	if wait, ok := l.allow("src", "p", now); !ok {
		t.Errorf("a minute after the first failure: refused for %v; want allowed", wait)
	}
	// One more failure: the ring's oldest is now the one at 2 s.
	l.failed("src", "p", now)
	if wait, ok := l.allow("src", "p", now); ok || wait != 2*time.Second {
		t.Errorf("a sixth failure: allow = %v, %v; want refused for 2s (until the one at 2 s is a minute old)", wait, ok)
	}
}

// TestLimiterCap: a map full of live entries refuses a key it does not
// hold (fail closed) and never grows past its cap; once they are dead a
// sweep frees it.
func TestLimiterCap(t *testing.T) {
	l := newLimiter()
	now := fakeTime
	for i := range maxLimitEntries {
		l.failed("src-"+strconv.Itoa(i), "p-"+strconv.Itoa(i), now)
	}
	l.failed("one-more", "one-more", now)
	if s, p := l.entries(); s != maxLimitEntries || p != maxLimitEntries {
		t.Fatalf("entries = %d, %d; want the cap %d each", s, p, maxLimitEntries)
	}
	if wait, ok := l.allow("new-source", "new-prefix", now.Add(2*time.Second)); ok || wait != failWindow {
		t.Errorf("a new key while full: allow = %v, %v; want refused for a minute", wait, ok)
	}
	if _, ok := l.allow("src-1", "p-1", now.Add(2*time.Second)); !ok {
		t.Error("a held key past its delay is refused while full")
	}
	l.passed("src-1", "p-1")
	if _, ok := l.allow("new-source", "new-prefix", now.Add(failWindow)); !ok {
		t.Error("a minute later (every entry dead) a new key is still refused")
	}
	if s, p := l.entries(); s != 1 || p != 1 {
		t.Errorf("after the sweep entries = %d, %d; want 1 each: the attempt in flight", s, p)
	}
}

// TestLimiterOneAttemptAtATime: while an attempt is being checked, another
// from its source or with its prefix is refused, so attempts sent
// together cannot all pass before the first failure is recorded (SPEC §8
// rev. 4: at most 5 wrong tokens a minute).
func TestLimiterOneAttemptAtATime(t *testing.T) {
	l := newLimiter()
	now := fakeTime
	if _, ok := l.allow("src", "p", now); !ok {
		t.Fatal("first attempt refused")
	}
	for _, k := range [][2]string{{"src", "other"}, {"other", "p"}} {
		if wait, ok := l.allow(k[0], k[1], now); ok || wait != failDelay {
			t.Errorf("allow(%q, %q) while one is checked = %v, %v; want refused for %v", k[0], k[1], wait, ok, failDelay)
		}
	}
	l.passed("src", "p")
	if _, ok := l.allow("src", "other", now); !ok {
		t.Error("refused after the first attempt passed")
	}
	l.failed("src", "other", now)
	// Twenty at once, a failDelay apart: never more than five checked.
	checked := 0
	for i := range 20 {
		at := now.Add(time.Duration(i+1) * failDelay)
		var ok [20]bool
		for j := range ok {
			_, ok[j] = l.allow("src", "p"+strconv.Itoa(j), at)
		}
		for j, o := range ok {
			if o {
				checked++
				l.failed("src", "p"+strconv.Itoa(j), at)
			}
		}
	}
	if checked != maxFailures-1 { // one failure of the source's five came before
		t.Errorf("%d wrong tokens checked within the minute; want %d", checked, maxFailures-1)
	}
}

func TestSourceKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":               "192.0.2.7",
		"::ffff:192.0.2.7":        "192.0.2.7",
		"2001:db8:1:2:3:4:5:6":    "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1234": "2001:db8:1:2::/64",
	} {
		if got := sourceKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("sourceKey(%s) = %s; want %s", in, got, want)
		}
	}
	if prefixKey("abcdefgh-one") != prefixKey("abcdefgh-two") || prefixKey("abcdefgh") == prefixKey("abcdefgi") {
		t.Error("prefixKey does not key on the first 8 bytes")
	}
}

// TestLoginLimitsThroughProxies drives POST /login: the source is the
// peer, or X-Forwarded-For's client when the peer is a trusted proxy;
// a wrong token is refused at once and then 429 with Retry-After.
func TestLoginLimitsThroughProxies(t *testing.T) {
	now := fakeTime
	// The test connection's peer is 0.0.0.0.
	trusted := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("10.0.0.0/8")}
	attempt := func(c *client, token, xff string) *http.Response {
		t.Helper()
		_, body := c.get("/login")
		var hdr []string
		if xff != "" {
			hdr = []string{"X-Forwarded-For", xff}
		}
		resp, _ := c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {token}}, hdr...)
		return resp
	}

	t.Run("trusted proxy", func(t *testing.T) {
		c := newClient(t, testAppWith(t, Options{Token: "token-1", TrustedProxies: trusted}, newMemSessions(), &now))
		if resp := attempt(c, "wrong-aaaaaaaa", "198.51.100.1, 10.1.1.1"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token = %d; want 401", resp.StatusCode)
		}
		resp := attempt(c, "other-bbbbbbbb", "198.51.100.1")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("same client right after = %d Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		// Another client behind the proxy, another prefix: its own limit.
		if resp := attempt(c, "token-1", "203.0.113.9, 10.2.2.2"); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("another client through the proxy = %d; want 303", resp.StatusCode)
		}
		// The same prefix from another client: held too.
		if resp := attempt(newClient(t, c.app), "wrong-aaaaaaaa-x", "203.0.113.77"); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("the same token prefix from another client = %d; want 429", resp.StatusCode)
		}
		// A client-written entry left of an untrusted one is not believed:
		// the source is 198.51.100.1, still held.
		if resp := attempt(newClient(t, c.app), "zzzzzzzzzz", "203.0.113.50, 198.51.100.1, 10.3.3.3"); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a spoofed left entry = %d; want 429 (the source is the rightmost untrusted address)", resp.StatusCode)
		}
	})

	t.Run("untrusted peer", func(t *testing.T) {
		c := newClient(t, testAppWith(t, Options{Token: "token-1"}, newMemSessions(), &now))
		if resp := attempt(c, "wrong-aaaaaaaa", "198.51.100.1"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token = %d; want 401", resp.StatusCode)
		}
		// X-Forwarded-For from a peer that is no trusted proxy is
		// ignored: another "client" is the same peer.
		if resp := attempt(c, "yyyyyyyyyy", "203.0.113.9"); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a forged X-Forwarded-For = %d; want 429", resp.StatusCode)
		}
		// Five wrong tokens a minute, then 429 until the minute is over.
		for i := 1; i < maxFailures; i++ {
			now = now.Add(failDelay)
			if resp := attempt(c, "wrong-"+strconv.Itoa(i)+"-bbbbbbbb", ""); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("wrong token %d = %d; want 401", i+1, resp.StatusCode)
			}
		}
		now = now.Add(failDelay)
		resp := attempt(c, "token-1", "")
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || ra < 50 || ra > 60 {
			t.Errorf("the right token after five wrong ones = %d Retry-After %q; want 429 and ~55 s", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		now = now.Add(failWindow)
		if resp := attempt(c, "token-1", ""); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("a minute later = %d; want 303", resp.StatusCode)
		}
	})

	t.Run("empty and oversized tokens", func(t *testing.T) {
		c := newClient(t, testAppWith(t, Options{Token: "token-1"}, newMemSessions(), &now))
		for _, tok := range []string{"", "   "} {
			_, body := c.get("/login")
			resp, page := c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {tok}})
			if resp.StatusCode != http.StatusBadRequest || !containsAll(page, "Enter a token") {
				t.Errorf("token %q = %d; want 400 asking for a token", tok, resp.StatusCode)
			}
		}
		if resp := attempt(c, string(make([]byte, maxTokenBytes+1)), ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a token of %d bytes = %d; want 400", maxTokenBytes+1, resp.StatusCode)
		}
		// None of them counted.
		if resp := attempt(c, "token-1", ""); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("the right token after refused empty ones = %d; want 303", resp.StatusCode)
		}
	})
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestLoginLimitsWithTheGatewayDown: while the gateway's admin API cannot
// be reached, a token that is not the API token is still counted and
// delayed like a wrong one (else the API token could be guessed at full
// speed), and the page does not show the admin API's address.
func TestLoginLimitsWithTheGatewayDown(t *testing.T) {
	now := fakeTime
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	down.Close() // nothing listens there now
	c := newClient(t, testAppWith(t, Options{Token: "token-1", AdminURL: "http://" + addr, SessionKey: bytes.Repeat([]byte{5}, 32)}, newMemSessions(), &now))
	attempt := func(token string) (*http.Response, string) {
		t.Helper()
		_, body := c.get("/login")
		return c.post("/login", url.Values{"csrf": {c.csrf(body)}, "token": {token}})
	}
	resp, page := attempt("wrong-aaaaaaaa")
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(page, addr) || !strings.Contains(page, "could not be asked") {
		t.Fatalf("a token with the gateway down = %d:\n%s\nwant 502 saying the gateway could not be asked, without its address", resp.StatusCode, page)
	}
	if resp, _ := attempt("other-bbbbbbbb"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right after = %d; want 429 (the attempt counted)", resp.StatusCode)
	}
	for i := 1; i < maxFailures; i++ {
		now = now.Add(failDelay)
		if resp, _ := attempt("wrong-" + strconv.Itoa(i) + "-cccccccc"); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("attempt %d = %d; want 502", i+1, resp.StatusCode)
		}
	}
	now = now.Add(failDelay)
	if resp, _ := attempt("token-1"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after five unanswered tokens = %d; want 429 until the minute is over", resp.StatusCode)
	}
}
