package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every NATS client of graygate pings its server every PingInterval and
// gives the connection up after MaxPingsOutstanding unanswered pings
// (SPEC §11 rev. 4), so a service leaves a hung server of a cluster within
// 15 s (three intervals) and reconnects to another; the client default is
// two minutes.
const (
	PingInterval        = 5 * time.Second
	MaxPingsOutstanding = 2
)

// ConnectOptions returns the nats.go options of the service's NATS
// identity and TLS (SPEC §7 "Who may write"): user and password, an nkey
// seed file, or a creds file (NATS_CREDS already applied), and a CA and
// client certificate. Every service dials with them, so the keys mean the
// same everywhere (no identity configured: an unauthenticated NATS, the
// development setup), and the pings every client of graygate keeps
// (PingInterval, MaxPingsOutstanding). Errors never show a secret.
func (n *NATS) ConnectOptions() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password.Reveal()))
	case n.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_seed_file: %w", redactErr(err))
		}
		opts = append(opts, o)
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	if n.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(n.TLS.CAFile))
	}
	if n.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(n.TLS.CertFile, n.TLS.KeyFile))
	}
	opts = append(opts, nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOutstanding))
	return opts, nil
}

// ServiceOptions are the options the analyzer and the collector dial
// with: their identity and TLS (ConnectOptions), their client name and
// inbox prefix, and reconnecting every second for as long as they run,
// each disconnection and reconnection logged on log.
func (n *NATS) ServiceOptions(s Service, log *slog.Logger) ([]nats.Option, error) {
	identity, err := n.ConnectOptions()
	if err != nil {
		return nil, err
	}
	return append(identity,
		nats.Name("graygate-"+s.String()),
		nats.CustomInboxPrefix(InboxPrefix(s)),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted()) }),
	), nil
}

// InboxPrefix is the prefix of the service's reply subjects:
// _INBOX_gateway, _INBOX_analyzer, _INBOX_collector (SPEC §11 rev. 3).
// infra/nats lets each identity subscribe only to its own prefix, so no
// identity receives replies or deliveries meant for another. Services
// dial with nats.CustomInboxPrefix(InboxPrefix(service)).
func InboxPrefix(s Service) string { return "_INBOX_" + s.String() }

// RedactedURL is nats.url without credentials, for logs and errors.
func (n *NATS) RedactedURL() string { return RedactURL(n.URL) }

func redactErr(err error) error { return errors.New(RedactURLs(err.Error())) }

// JetStream returns the service's JetStream context on nc: under
// nats.api_prefix when it is set (infra/nats: the streams live in an
// account the service reaches through imports), else the default $JS.API.
func (n *NATS) JetStream(nc *nats.Conn, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	if n.APIPrefix == "" {
		return jetstream.New(nc, opts...)
	}
	return jetstream.NewWithAPIPrefix(nc, n.APIPrefix, opts...)
}

// checkAPIPrefix accepts a literal subject: dot-separated non-empty
// tokens without wildcards or white space.
func checkAPIPrefix(p string) error {
	for _, tok := range strings.Split(p, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%q is not a subject prefix: an empty token (a leading, trailing or double dot)", p)
		case tok == "*" || tok == ">":
			return fmt.Errorf("%q is not a subject prefix: the wildcard %q", p, tok)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("%q is not a subject prefix: white space", p)
		}
	}
	return nil
}

// CheckFiles reads the files the NATS identity and TLS name (nkey seed,
// creds, CA, client certificate) as the first connection would, so that
// `gateway validate` refuses what `gateway serve` would fail on (SPEC §2:
// a config validate accepts always serves). Each error names its key and
// never shows a secret. Load runs it for every service that connects.
func (n *NATS) CheckFiles() error {
	if n.NKeySeedFile != "" && n.User == "" {
		if _, err := nats.NkeyOptionFromSeed(n.NKeySeedFile); err != nil {
			return fmt.Errorf("nats.nkey_seed_file: %w", redactErr(err))
		}
	}
	o := nats.GetDefaultOptions()
	for _, f := range []struct {
		key string
		opt nats.Option
		set bool
	}{
		{"nats.creds_file", nats.UserCredentials(n.CredsFile), n.CredsFile != "" && n.User == "" && n.NKeySeedFile == ""},
		{"nats.tls.ca_file", nats.RootCAs(n.TLS.CAFile), n.TLS.CAFile != ""},
		{"nats.tls.cert_file", nats.ClientCert(n.TLS.CertFile, n.TLS.KeyFile), n.TLS.CertFile != ""},
	} {
		if !f.set {
			continue
		}
		if err := f.opt(&o); err != nil {
			return fmt.Errorf("%s: %w", f.key, redactErr(err))
		}
	}
	if o.UserJWT != nil {
		if _, err := o.UserJWT(); err != nil {
			return fmt.Errorf("nats.creds_file: %w", redactErr(err))
		}
	}
	if o.SignatureCB != nil {
		if _, err := o.SignatureCB([]byte("graygate validate")); err != nil {
			return fmt.Errorf("nats.creds_file: %w", redactErr(err))
		}
	}
	return nil
}
