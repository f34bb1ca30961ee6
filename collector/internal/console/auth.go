package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Cookie names and the session's life (SPEC §8 rev. 3).
const (
	sessionCookie = "graygate_session"
	csrfCookie    = "graygate_csrf"
	sessionTTL    = 12 * time.Hour
	// maxTokenBytes caps the token a login form may carry; maxFormBytes
	// the whole form (the listener's own body limit is larger).
	maxTokenBytes = 1024
	maxFormBytes  = 4 << 10
)

// contentSecurityPolicy allows nothing from outside the collector and no
// inline script or style: every script and stylesheet is a file under
// /static/, and the charts are SVG drawn with attributes and classes.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// Domain separation of the HMACs keyed by the API token: a session MAC can
// never be replayed as a CSRF token or the other way round.
const (
	sessionPurpose = "graygate-console-session/v1\x00"
	csrfPurpose    = "graygate-console-csrf/v1\x00"
)

// auth holds the key of the console's HMACs: the API token. Every collector
// replica with the same token accepts the same sessions, and rotating the
// token ends them all.
type auth struct {
	key   []byte
	token [32]byte // SHA-256 of the token, compared in constant time
	now   func() time.Time
}

func newAuth(token string, now func() time.Time) *auth {
	return &auth{key: []byte(token), token: sha256.Sum256([]byte(token)), now: now}
}

func (a *auth) mac(purpose, msg string) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(purpose))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// checkToken reports whether got is the API token, in constant time (the
// comparison is of SHA-256 digests, so not even the length leaks).
func (a *auth) checkToken(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], a.token[:]) == 1
}

// newSession returns a session cookie value that expires sessionTTL from
// now: the expiry in Unix seconds and its HMAC.
func (a *auth) newSession() (value string, expires time.Time) {
	expires = a.now().Add(sessionTTL).Truncate(time.Second)
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(a.mac(sessionPurpose, exp)), expires
}

// validSession reports whether v is a session this token signed that has
// not expired. An expiry further ahead than sessionTTL (a minute of clock
// skew between replicas allowed) is refused as well.
func (a *auth) validSession(v string) bool {
	exp, sig, ok := strings.Cut(v, ".")
	if !ok || len(v) > 128 {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || strconv.FormatInt(unix, 10) != exp {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, a.mac(sessionPurpose, exp)) {
		return false
	}
	now := a.now()
	at := time.Unix(unix, 0)
	return now.Before(at) && at.Sub(now) <= sessionTTL+time.Minute
}

// csrfFor returns the form token that goes with the CSRF cookie value
// nonce: an HMAC of it, so a site that can neither read the cookie nor
// compute the HMAC cannot forge a form (the cookie is also SameSite=Strict).
func (a *auth) csrfFor(nonce string) string {
	return base64.RawURLEncoding.EncodeToString(a.mac(csrfPurpose, nonce))
}

// validCSRF reports whether form is the token of the cookie nonce.
func (a *auth) validCSRF(nonce, form string) bool {
	if nonce == "" || form == "" || len(nonce) > 64 || len(form) > 64 {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(form)
	return err == nil && hmac.Equal(got, a.mac(csrfPurpose, nonce))
}

// newNonce returns a random CSRF cookie value.
func newNonce() string {
	var b [18]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// cookie returns a console cookie: HttpOnly, SameSite=Strict, path /, and
// Secure when the request came over TLS (or through a proxy that says so).
func cookie(c *fiber.Ctx, name, value string, expires time.Time) *fiber.Cookie {
	return &fiber.Cookie{
		Name: name, Value: value, Path: "/", Expires: expires,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: c.Protocol() == "https",
	}
}

// csrfToken returns the form token for this browser, setting its CSRF
// cookie first when it has none (or a malformed one).
func (s *Console) csrfToken(c *fiber.Ctx) string {
	nonce := c.Cookies(csrfCookie)
	if len(nonce) < 16 || len(nonce) > 64 {
		nonce = newNonce()
		c.Cookie(cookie(c, csrfCookie, nonce, time.Time{}))
	}
	return s.auth.csrfFor(nonce)
}

// checkPost refuses a POST whose CSRF token does not match the browser's
// CSRF cookie, whose Origin is another site, or whose form is too big.
func (s *Console) checkPost(c *fiber.Ctx) error {
	if len(c.Body()) > maxFormBytes {
		return httpError(fiber.StatusRequestEntityTooLarge, "the form is larger than "+strconv.Itoa(maxFormBytes)+" bytes")
	}
	if o := c.Get(fiber.HeaderOrigin); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != c.Hostname() {
			return httpError(fiber.StatusForbidden, "the form was sent from another site")
		}
	}
	if !s.auth.validCSRF(c.Cookies(csrfCookie), c.FormValue("csrf")) {
		return httpError(fiber.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and send it again")
	}
	return nil
}

// headers sets the security headers of every console answer.
func headers(c *fiber.Ctx) error {
	c.Set("Content-Security-Policy", contentSecurityPolicy)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderReferrerPolicy, "same-origin")
	c.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.Set("Cross-Origin-Resource-Policy", "same-origin")
	return c.Next()
}

// enabled answers 403 while no API token is configured, as /v1/* does.
func (s *Console) enabled(c *fiber.Ctx) error {
	if s.auth == nil {
		return s.fail(c, httpError(fiber.StatusForbidden,
			"the console is disabled: no API token is configured (collector.api_token or GRAYGATE_API_TOKEN)"))
	}
	return c.Next()
}

// session lets a request with a valid session through; any other GET is
// sent to the login page (with where it was going), anything else gets 401.
func (s *Console) session(c *fiber.Ctx) error {
	if s.auth.validSession(c.Cookies(sessionCookie)) {
		c.Locals(localsLoggedIn, true)
		return c.Next()
	}
	if c.Method() != fiber.MethodGet {
		return s.fail(c, httpError(fiber.StatusUnauthorized, "log in first"))
	}
	return c.Redirect("/login?next="+url.QueryEscape(string(c.Request().URI().RequestURI())), fiber.StatusSeeOther)
}

// safeNext returns next when it is a path of this site, else "/".
func safeNext(next string) string {
	if len(next) > 2048 || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\\r\n") || strings.HasPrefix(next, "/login") {
		return "/"
	}
	return next
}

type loginPage struct {
	page
	Next  string
	Error string
}

func (s *Console) loginForm(c *fiber.Ctx) error {
	if err := onlyParams(c, "next"); err != nil {
		return err
	}
	next := safeNext(c.Query("next"))
	if s.auth.validSession(c.Cookies(sessionCookie)) {
		return c.Redirect(next, fiber.StatusSeeOther)
	}
	return s.render(c, fiber.StatusOK, "login", loginPage{page: s.page(c, "Log in"), Next: next})
}

// login checks the token (in constant time) and sets the session cookie.
// The token itself is never logged nor stored in the cookie.
func (s *Console) login(c *fiber.Ctx) error {
	if err := s.checkPost(c); err != nil {
		return err
	}
	next := safeNext(c.FormValue("next"))
	token := c.FormValue("token")
	if len(token) > maxTokenBytes || !s.auth.checkToken(token) {
		s.log.Warn("console login refused", "remote", c.IP())
		return s.render(c, fiber.StatusUnauthorized, "login", loginPage{page: s.page(c, "Log in"), Next: next,
			Error: "That is not the collector's API token."})
	}
	v, exp := s.auth.newSession()
	c.Cookie(cookie(c, sessionCookie, v, exp))
	s.log.Info("console login", "remote", c.IP())
	return c.Redirect(next, fiber.StatusSeeOther)
}

// logout clears the session cookie. A session is stateless, so this ends
// it in this browser; rotating the API token ends every session.
func (s *Console) logout(c *fiber.Ctx) error {
	if err := s.checkPost(c); err != nil {
		return err
	}
	c.Cookie(cookie(c, sessionCookie, "", time.Unix(1, 0)))
	return c.Redirect("/login", fiber.StatusSeeOther)
}
