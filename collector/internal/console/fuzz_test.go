package console

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// FuzzSafeNext: whatever next a browser sends, the result is "/" or next
// itself, and is a path on the console: one leading slash, no host a URL
// parser or a browser (which drops TAB, CR and LF) would see, no
// backslash, no control character.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/", "/samples?limit=3", "//evil", "/\t/evil", "/\\evil", "/%2F/evil", "https://x/", "/%09/x", "/\u2028x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got != "/" && got != next {
			t.Fatalf("safeNext(%q) = %q; want / or the input", next, got)
		}
		stripped := strings.NewReplacer("\t", "", "\r", "", "\n", "").Replace(got)
		u, err := url.Parse(stripped)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(got, "/") || strings.HasPrefix(stripped, "//") ||
			strings.ContainsRune(got, '\\') || strings.ContainsFunc(got, unicode.IsControl) {
			t.Fatalf("safeNext(%q) = %q: not a path on the console (%v)", next, got, err)
		}
		if dec, err := url.PathUnescape(got); err != nil || strings.HasPrefix(dec, "//") || strings.ContainsRune(dec, '\\') {
			t.Fatalf("safeNext(%q) = %q decodes to %q", next, got, dec)
		}
	})
}

// FuzzClient: whatever X-Forwarded-For a trusted proxy passes on, the
// source is a valid address, and never a trusted proxy's unless every
// entry is one.
func FuzzClient(f *testing.F) {
	for _, s := range []string{"", "198.51.100.1", "198.51.100.1, 10.0.0.1", "bogus, 10.0.0.2", "::1,,", "2001:db8::1, 10.9.9.9"} {
		f.Add(s)
	}
	s := &Console{proxies: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("10.0.0.0/8")}}
	app := fiber.New()
	f.Fuzz(func(t *testing.T, xff string) {
		var fc fasthttp.RequestCtx
		fc.Request.Header.Set(fiber.HeaderXForwardedFor, xff)
		c := app.AcquireCtx(&fc)
		defer app.ReleaseCtx(c)
		a := s.client(c)
		if !a.IsValid() {
			t.Fatalf("client(%q) = %v; want a valid address", xff, a)
		}
		if s.trusted(a) {
			// Right of the first entry (from the right) that does not
			// parse, every address is a trusted proxy's.
			hops := strings.Split(xff, ",")
			for i, n := len(hops)-1, 0; i >= 0 && n < maxForwardedHops; i, n = i-1, n+1 {
				h := strings.TrimSpace(hops[i])
				if h == "" {
					continue
				}
				addr, err := netip.ParseAddr(h)
				if err != nil {
					break
				}
				if !s.trusted(addr.Unmap()) {
					t.Fatalf("client(%q) = %v, a trusted proxy, though %v is not one", xff, a, addr)
				}
			}
		}
	})
}
