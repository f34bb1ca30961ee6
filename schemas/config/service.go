package config

import (
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Service selects the service a configuration is loaded for (SPEC §2,
// rev. 2): each service resolves only the secrets and files it uses, and
// `${VAR}` is expanded (an unset variable an error) only in the keys it
// reads. Pass it to Load or Parse: config.Load(path, config.ForGateway).
type Service uint8

// Services. ForAll, the default, resolves everything: tools and tests that
// check a file for every service at once.
const (
	ForAll Service = iota
	// ForGateway: nats, gateway, sampling_contract, routing, deployments;
	// the admin, client and force tokens, the upstream API keys and the
	// response schema files. Never postgres (DATABASE_URL).
	ForGateway
	// ForCollector: nats, postgres, collector, and analyzer.promotion
	// (the console's "promote to the next step", SPEC §8 rev. 4); the API
	// token, the console's session key and DATABASE_URL. Never an
	// upstream key, prompt or schema file.
	ForCollector
	// ForAnalyzer: nats, analyzer, and of deployments only which have a
	// gray arm and their rollout. Never an upstream key, prompt or schema
	// file, nor DATABASE_URL.
	ForAnalyzer
	// ForAnalyzerTools: what the analyzer's tools read, `analyzer status
	// --config` (analyzer.listen) and `analyzer simulate --config` (the
	// gates, confidence, interval, window and promotion): the analyzer
	// section with its own variables (SPEC §2: a service resolves only what
	// it uses). No secret and no file: not the signing key, not the NATS
	// password, no other section's variable.
	ForAnalyzerTools
	// ForPostgres: what the collector's commands that read or migrate
	// Postgres directly read (`collector migrate`, `samples`,
	// `deadletters`, `rollouts`): postgres.url and DATABASE_URL. Not the
	// NATS password, the API token or the console's session key.
	ForPostgres
)

// String names the service.
func (s Service) String() string {
	switch s {
	case ForGateway:
		return "gateway"
	case ForCollector:
		return "collector"
	case ForAnalyzer:
		return "analyzer"
	case ForAnalyzerTools:
		return "analyzer tools"
	case ForPostgres:
		return "collector (Postgres only)"
	}
	return "all services"
}

// reads reports whether the service reads the key path (and so expands its
// `${VAR}` references).
func (s Service) reads(path string) bool {
	switch s {
	case ForAnalyzerTools:
		return path == "analyzer" || strings.HasPrefix(path, "analyzer.")
	case ForPostgres:
		return path == "postgres" || strings.HasPrefix(path, "postgres.")
	}
	section, rest, _ := strings.Cut(path, ".")
	if i := strings.IndexByte(section, '['); i >= 0 {
		section = section[:i]
	}
	switch section {
	case "", "nats":
		return true
	}
	switch s {
	case ForGateway:
		switch section {
		case "gateway", "sampling_contract", "routing", "deployments":
			return true
		}
		return false
	case ForCollector:
		return section == "postgres" || section == "collector" ||
			path == "analyzer.promotion" || strings.HasPrefix(path, "analyzer.promotion.")
	case ForAnalyzer:
		if section == "analyzer" {
			return true
		}
		if section != "deployments" {
			return false
		}
		// deployments.<name>.rollout.* except the schema file.
		_, key, ok := strings.Cut(rest, ".")
		if !ok {
			return true
		}
		return strings.HasPrefix(key, "rollout") && !strings.HasPrefix(key, "rollout.response_schema")
	}
	return true
}

// resolves reports whether the service resolves a kind of secret or file.
func (s Service) gateway() bool   { return s == ForAll || s == ForGateway }
func (s Service) collector() bool { return s == ForAll || s == ForCollector }
func (s Service) postgres() bool  { return s.collector() || s == ForPostgres }

// connects reports whether the service connects to NATS (and so reads its
// password): the analyzer's tools and the Postgres commands do not.
func (s Service) connects() bool { return s != ForAnalyzerTools && s != ForPostgres }

// IsLoopback reports whether a listen address binds loopback only:
// localhost, 127.0.0.0/8 or ::1. An empty host, 0.0.0.0 and :: bind every
// interface and are not (SPEC §11).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedactURL returns raw with the password of its userinfo replaced (and a
// user name without a password too, since it may be a token): a URL is
// never printed with its credentials (SPEC §11). Text that does not parse
// as a URL with a scheme is returned as "<redacted>" when it has an @.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if strings.Contains(raw, "@") {
			return "<redacted>"
		}
		// A key=value connection string (host=… password=…).
		return dsnPassword.ReplaceAllString(raw, "${1}redacted")
	}
	q := u.Query()
	redacted := false
	for k := range q {
		if secretParam(k) {
			q.Set(k, "redacted")
			redacted = true
		}
	}
	if u.User == nil && !redacted {
		return raw
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if redacted {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// dsnPassword finds the value of a password key in a key=value
// connection string: a word, or a quoted value with \' and \\ escapes.
var dsnPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// secretParam reports whether a URL query parameter carries a secret
// (Postgres' password and sslpassword, a token, a key).
func secretParam(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "password") || k == "token" || k == "key" || k == "api_key"
}

// RedactURLs replaces every URL with credentials in a text (an error
// message of a library that echoes its input) with its redacted form.
func RedactURLs(text string) string {
	if !strings.Contains(text, "@") {
		return text
	}
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == '"' || r == '\'' || r == ',' })
	for _, f := range fields {
		if strings.Contains(f, "://") && strings.Contains(f, "@") {
			i := strings.Index(f, "://")
			j := strings.LastIndex(f, "@")
			if j > i {
				text = strings.ReplaceAll(text, f, f[:i+3]+"redacted@"+f[j+1:])
			}
		}
	}
	return text
}
