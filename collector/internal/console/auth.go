package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// Cookie names and the session's life (SPEC §8 rev. 4).
const (
	sessionCookie = "graygate_session"
	// csrfCookie is the login form's double-submit cookie: before there
	// is a session, the form's CSRF token must equal it.
	csrfCookie = "graygate_csrf"
	// hostPrefix is prepended to both names under TLS: the browser then
	// takes the cookie only Secure, with Path=/ and no Domain, so no
	// other host (a sibling subdomain) can set it.
	hostPrefix = "__Host-"
	sessionTTL = 12 * time.Hour
	// maxTokenBytes caps the token a login form may carry; maxFormBytes
	// the whole form (the listener's own body limit is larger).
	maxTokenBytes = 1024
	maxFormBytes  = 4 << 10
	// sessionIDBytes is the size of a session's random id.
	sessionIDBytes = 32
	// storeTimeout bounds a session's lookup.
	storeTimeout = 5 * time.Second
)

// contentSecurityPolicy allows nothing from outside the collector and no
// inline script or style: every script and stylesheet is a file under
// /static/, and the charts are SVG drawn with attributes and classes.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// Domain separation of the console's MACs.
const (
	csrfPurpose       = "graygate-console-csrf/v2\x00"
	credentialPurpose = "graygate-console-api-token/v1\x00"
)

// session is a signed-in browser's session, as loaded for one request.
type session struct {
	id  []byte // the cookie's random id (never stored)
	row store.Session
	// token is an operator's admin token, unsealed for this request ("" for
	// an API-token session).
	token string
}

func (s *session) operator() string { return s.row.Operator }

// csrf returns the session's CSRF token: an HMAC of the id's hash keyed
// by the session's own secret, so it is valid for this session only.
func (s *session) csrf() string {
	m := hmac.New(sha256.New, s.row.CSRFSecret)
	m.Write([]byte(csrfPurpose))
	m.Write(s.row.IDHash)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validCSRF reports whether form is the session's CSRF token.
func (s *session) validCSRF(form string) bool {
	if form == "" || len(form) > 64 {
		return false
	}
	return hmac.Equal([]byte(form), []byte(s.csrf()))
}

// credential binds an API-token session to the token: an HMAC of the
// token keyed by the session's id, which the table does not hold.
func credential(id []byte, apiToken string) []byte {
	m := hmac.New(sha256.New, id)
	m.Write([]byte(credentialPurpose))
	m.Write([]byte(apiToken))
	return m.Sum(nil)
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// checkToken reports whether got is the API token, in constant time (the
// comparison is of SHA-256 digests, so not even the length leaks).
func (s *Console) checkToken(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.tokenHash[:]) == 1
}

// cookieName is name, __Host- prefixed under TLS.
func (s *Console) cookieName(c *fiber.Ctx, name string) string {
	if s.secure(c) {
		return hostPrefix + name
	}
	return name
}

// cookie returns a console cookie: HttpOnly, SameSite=Strict, Path=/, no
// Domain, and Secure with the __Host- prefix under TLS.
func (s *Console) cookie(c *fiber.Ctx, name, value string, expires time.Time) *fiber.Cookie {
	return &fiber.Cookie{
		Name: s.cookieName(c, name), Value: value, Path: "/", Expires: expires,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: s.secure(c),
	}
}

// loginNonce returns the login form's CSRF token, setting its cookie
// first when the browser has none (or a malformed one).
func (s *Console) loginNonce(c *fiber.Ctx) string {
	nonce := c.Cookies(s.cookieName(c, csrfCookie))
	if len(nonce) < 22 || len(nonce) > 64 {
		nonce = base64.RawURLEncoding.EncodeToString(random(18))
		c.Cookie(s.cookie(c, csrfCookie, nonce, time.Time{}))
	}
	return nonce
}

// host is the host the browser asked for: the Host header, or a trusted
// proxy's X-Forwarded-Host.
func (s *Console) host(c *fiber.Ctx) string {
	if fh := strings.TrimSpace(c.Get(fiber.HeaderXForwardedHost)); fh != "" && s.trusted(peer(c)) {
		return fh
	}
	return string(c.Request().Host())
}

// checkForm refuses a POST whose form is too big or whose Origin is
// another site.
func (s *Console) checkForm(c *fiber.Ctx) error {
	if len(c.Body()) > maxFormBytes {
		return httpError(fiber.StatusRequestEntityTooLarge, "the form is larger than "+strconv.Itoa(maxFormBytes)+" bytes")
	}
	if o := c.Get(fiber.HeaderOrigin); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != s.host(c) {
			return httpError(fiber.StatusForbidden, "the form was sent from another site")
		}
	}
	return nil
}

// formValue is the form field key of a POST's urlencoded body, and only
// of its body: fiber's FormValue looks in the query string first, so a
// CSRF token or a token in a URL (which logs keep) would count.
func formValue(c *fiber.Ctx, key string) string {
	return string(c.Request().PostArgs().Peek(key))
}

// checkPost refuses a signed-in POST whose CSRF token is not its session's.
func (s *Console) checkPost(c *fiber.Ctx, sess *session) error {
	if err := s.checkForm(c); err != nil {
		return err
	}
	if !sess.validCSRF(formValue(c, "csrf")) {
		return errStaleForm
	}
	return nil
}

// headers sets the security headers of every console answer.
func headers(c *fiber.Ctx) error {
	c.Set("Content-Security-Policy", contentSecurityPolicy)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderReferrerPolicy, "same-origin")
	c.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.Set("Cross-Origin-Resource-Policy", "same-origin")
	return c.Next()
}

// enabled answers 403 while no API token is configured, as /v1/* does.
func (s *Console) enabled(c *fiber.Ctx) error {
	if s.token == "" {
		return s.fail(c, httpError(fiber.StatusForbidden,
			"the console is disabled: no API token is configured (collector.api_token or GRAYGATE_API_TOKEN)"))
	}
	return c.Next()
}

const localsSession = "console_session"

// sessionOf returns the request's session (nil before s.session ran or
// without one).
func sessionOf(c *fiber.Ctx) *session {
	sess, _ := c.Locals(localsSession).(*session)
	return sess
}

// loadSession returns the browser's session, nil when it has none that
// holds: no cookie, an id no row has, an expired row, an API-token
// session signed in with another API token, or an operator's whose
// sealed token does not open under this collector's key (or with no
// key). The error is the store's.
func (s *Console) loadSession(c *fiber.Ctx) (*session, error) {
	v := c.Cookies(s.cookieName(c, sessionCookie))
	if v == "" || len(v) > 64 {
		return nil, nil
	}
	id, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(id) != sessionIDBytes {
		return nil, nil
	}
	sum := sha256.Sum256(id)
	ctx, cancel := context.WithTimeout(c.UserContext(), storeTimeout)
	defer cancel()
	row, err := s.sessions.Session(ctx, sum[:], s.now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sess := &session{id: id, row: row}
	switch {
	case row.Operator == "":
		if !hmac.Equal(row.Credential, credential(id, s.token)) {
			return nil, nil // the API token changed since the sign-in
		}
	case s.sealer == nil:
		return nil, nil
	default:
		if sess.token, err = s.sealer.open(row.SealedToken, row.IDHash, row.Operator); err != nil {
			return nil, nil
		}
	}
	return sess, nil
}

// session lets a request with a valid session through; any other GET is
// sent to the login page (with where it was going), anything else gets 401.
func (s *Console) session(c *fiber.Ctx) error {
	sess, err := s.loadSession(c)
	if err != nil {
		return s.fail(c, err)
	}
	if sess != nil {
		c.Locals(localsSession, sess)
		return c.Next()
	}
	if c.Method() != fiber.MethodGet {
		return s.fail(c, httpError(fiber.StatusUnauthorized, "sign in first"))
	}
	return c.Redirect("/login?next="+url.QueryEscape(string(c.Request().URI().RequestURI())), fiber.StatusSeeOther)
}

// safeNext returns next when it is a path on this console (SPEC §8 rev.
// 4): it starts with one /, and holds no scheme or host, no //, no
// backslash, no control character (TAB, CR and LF included; browsers drop
// them, so "/\t/evil.example" would be "//evil.example"), no
// percent-encoded one of those, and is valid UTF-8; else "/".
func safeNext(next string) string {
	if len(next) > 2048 || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "/login") || !utf8.ValidString(next) {
		return "/"
	}
	if strings.Contains(next, "//") || strings.ContainsRune(next, '\\') {
		return "/"
	}
	for _, r := range next {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return "/"
		}
	}
	// What a decoding hop would turn into one of the above.
	if dec, err := url.PathUnescape(next); err != nil || dec != next && safeNext(dec) != dec {
		return "/"
	}
	return next
}

type loginPage struct {
	page
	Next  string
	Error string
	// Operators is false when this console cannot sign an operator in
	// (no admin_url or no session key), and Why says why.
	Operators bool
	Why       string
}

func (s *Console) loginPage(c *fiber.Ctx, next, msg string) loginPage {
	p := loginPage{page: s.page(c, "Sign in"), Next: next, Error: msg, Operators: s.admin != nil && s.sealer != nil}
	switch {
	case s.admin == nil:
		p.Why = "no collector.console.admin_url is configured"
	case s.sealer == nil:
		p.Why = "no collector.console.session_key_file is configured"
	}
	return p
}

func (s *Console) loginForm(c *fiber.Ctx) error {
	if err := onlyParams(c, "next"); err != nil {
		return err
	}
	next := safeNext(c.Query("next"))
	sess, err := s.loadSession(c)
	if err != nil {
		return err
	}
	if sess != nil {
		return c.Redirect(next, fiber.StatusSeeOther)
	}
	return s.render(c, fiber.StatusOK, "login", s.loginPage(c, next, ""))
}

// login signs a browser in (SPEC §8 rev. 4). The API token opens a
// read-only session; another token, when this console has an admin_url
// and a session key, is asked about at the gateway (GET /admin/whoami)
// and opens that operator's session. A wrong token counts against the
// source's and the token prefix's limits (limit.go). The token is never
// logged, and stored only sealed.
func (s *Console) login(c *fiber.Ctx) error {
	if err := s.checkForm(c); err != nil {
		return err
	}
	nonce := c.Cookies(s.cookieName(c, csrfCookie))
	if form := formValue(c, "csrf"); nonce == "" || len(nonce) > 64 || subtle.ConstantTimeCompare([]byte(form), []byte(nonce)) != 1 {
		return errStaleForm
	}
	next := safeNext(formValue(c, "next"))
	token := formValue(c, "token")
	refuse := func(status int, msg string) error {
		return s.render(c, status, "login", s.loginPage(c, next, msg))
	}
	switch {
	case strings.TrimSpace(token) == "":
		return refuse(fiber.StatusBadRequest, "Enter a token: the collector's API token, or your own admin token.")
	case len(token) > maxTokenBytes:
		return refuse(fiber.StatusBadRequest, "That token is longer than "+strconv.Itoa(maxTokenBytes)+" bytes: no token of this console is.")
	}
	src, prefix, now := sourceKey(s.client(c)), prefixKey(token), s.now()
	if wait, ok := s.limits.allow(src, prefix, now); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
		// Debug: a flood of refused attempts must not flood the log (each
		// wrong token that counted was logged at warn).
		s.log.Debug("console sign-in refused: too many wrong tokens", "source", src, "retry_after_s", secs)
		return refuse(fiber.StatusTooManyRequests, "Too many sign-in attempts with a wrong token: try again in "+strconv.Itoa(secs)+" s.")
	}
	wrongToken := false
	defer func() {
		if wrongToken {
			s.limits.failed(src, prefix, s.now())
		} else {
			s.limits.passed(src, prefix)
		}
	}()
	if s.checkToken(token) {
		return s.signIn(c, next, "", "")
	}
	// wrong answers a token that is not the API token (and, as far as
	// anyone can say, no operator's) after the delay, counted against the
	// limits.
	wrong := func(status int, msg string) error {
		wrongToken = true
		if err := refuse(status, msg); err != nil {
			return err
		}
		s.delay.later(c, failDelay)
		return nil
	}
	if s.admin == nil || s.sealer == nil {
		s.log.Warn("console sign-in refused: wrong token", "source", src)
		return wrong(fiber.StatusUnauthorized, "That is not the collector's API token (operators cannot sign in here: "+s.loginPage(c, next, "").Why+").")
	}
	op, err := s.admin.whoami(c.UserContext(), token)
	var ae *adminError
	switch {
	case errors.As(err, &ae) && (ae.Status == fiber.StatusUnauthorized || ae.Status == fiber.StatusForbidden):
		s.log.Warn("console sign-in refused: wrong token", "source", src)
		return wrong(fiber.StatusUnauthorized, "That is neither the collector's API token nor an admin token the gateway knows.")
	case err != nil:
		// Not the API token, and no one to say whether it is an
		// operator's: delayed and counted like a wrong token, so that an
		// unreachable gateway does not lift the limit on guessing the API
		// token. The cause (the admin API's address) is logged, not shown
		// to a visitor who has not signed in.
		s.log.Warn("console sign-in: the gateway did not say who the token is", "source", src, "err", err)
		return wrong(fiber.StatusBadGateway, "The gateway could not be asked who this token belongs to; try again later.")
	case op == "":
		return refuse(fiber.StatusForbidden, "That is the gateway's shared admin token, which names no operator: sign in with your own admin token (gateway.admin_tokens_env).")
	case !events.ValidOperator(op):
		return refuse(fiber.StatusBadGateway, "The gateway named an operator this console cannot show.")
	}
	return s.signIn(c, next, op, token)
}

// signIn stores a new session (an operator's with their admin token
// sealed; the API token's otherwise), sets its cookie and sends the
// browser on to next. Expired sessions are purged on the way.
func (s *Console) signIn(c *fiber.Ctx, next, operator, adminToken string) error {
	id := random(sessionIDBytes)
	sum := sha256.Sum256(id)
	now := s.now()
	row := store.Session{IDHash: sum[:], Operator: operator, CSRFSecret: random(32), CreatedAt: now,
		ExpiresAt: now.Add(sessionTTL).Truncate(time.Second)}
	if operator == "" {
		row.Credential = credential(id, s.token)
	} else {
		row.SealedToken = s.sealer.seal(adminToken, row.IDHash, operator)
	}
	ctx := c.UserContext()
	// A session the browser already holds ends: a sign-in always starts
	// a fresh id.
	if old, err := s.loadSession(c); err == nil && old != nil {
		if err := s.sessions.DeleteSession(ctx, old.row.IDHash); err != nil {
			return err
		}
	}
	if err := s.sessions.CreateSession(ctx, row); err != nil {
		return err
	}
	if n, err := s.sessions.PurgeSessions(ctx, now); err != nil {
		s.log.Warn("console: purge expired sessions", "err", err)
	} else if n > 0 {
		s.log.Debug("console: purged expired sessions", "count", n)
	}
	c.Cookie(s.cookie(c, sessionCookie, base64.RawURLEncoding.EncodeToString(id), row.ExpiresAt))
	if operator != "" {
		s.log.Info("console sign-in", "operator", operator, "source", sourceKey(s.client(c)))
	} else {
		s.log.Info("console sign-in (read-only)", "source", sourceKey(s.client(c)))
	}
	return c.Redirect(next, fiber.StatusSeeOther)
}

// logout ends the session for every replica (its row is deleted) and
// clears the cookie.
func (s *Console) logout(c *fiber.Ctx) error {
	sess, err := s.loadSession(c)
	if err != nil {
		return err
	}
	if sess != nil {
		if err := s.checkPost(c, sess); err != nil {
			return err
		}
		if err := s.sessions.DeleteSession(c.UserContext(), sess.row.IDHash); err != nil {
			return err
		}
	}
	c.Cookie(s.cookie(c, sessionCookie, "", time.Unix(1, 0)))
	return c.Redirect("/login", fiber.StatusSeeOther)
}
