package console

import (
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/api"
)

// TestWrongTokenAnsweredAfterADelay: on a real connection a wrong token
// is answered after failDelay (SPEC §8 rev. 4), with the console's
// headers and the connection closed, so a client guessing one token
// after another is slowed to one guess a second and refused (429) at the
// sixth within the minute, which is answered at once.
func TestWrongTokenAnsweredAfterADelay(t *testing.T) {
	con, err := New(fakeReader{}, Options{Token: "s3cret-token", Sessions: newMemSessions()})
	if err != nil {
		t.Fatal(err)
	}
	app := api.New(fakeReader{}, api.Options{Token: "s3cret-token", Mount: con.Register}).App()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	base := "http://" + ln.Addr().String()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	attempt := func(token string) (*http.Response, time.Duration) {
		t.Helper()
		resp, err := client.Get(base + "/login")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := csrf.FindSubmatch(page)
		if m == nil {
			t.Fatalf("no CSRF field on the login page:\n%s", page)
		}
		start := time.Now()
		resp, err = client.PostForm(base+"/login", url.Values{"csrf": {string(m[1])}, "token": {token}})
		if err != nil {
			t.Fatalf("POST /login: %v", err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, time.Since(start)
	}
	for i := range maxFailures {
		resp, took := attempt("wrong-" + string(rune('a'+i)))
		if resp.StatusCode != http.StatusUnauthorized || took < failDelay-50*time.Millisecond {
			t.Errorf("wrong token %d: %d after %v; want 401 after about %v", i+1, resp.StatusCode, took, failDelay)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" || !resp.Close {
			t.Errorf("wrong token %d: headers %v, close %v; want no-store, nosniff and the connection closed", i+1, resp.Header, resp.Close)
		}
	}
	resp, took := attempt("wrong-f")
	if resp.StatusCode != http.StatusTooManyRequests || took > failDelay/2 {
		t.Errorf("sixth wrong token within the minute: %d after %v; want 429 at once", resp.StatusCode, took)
	}
	// The last answer's timer ends just after its bytes reach the client.
	for deadline := time.Now().Add(time.Second); con.delay.waiting.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := con.delay.waiting.Load(); n != 0 {
		t.Errorf("%d delayed answers still counted as waiting; want 0", n)
	}
}
