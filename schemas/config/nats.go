package config

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectOptions returns the nats.go options of the service's NATS
// identity and TLS (SPEC §7 "Who may write"): user and password, an nkey
// seed file, or a creds file (NATS_CREDS already applied), and a CA and
// client certificate. Every service dials with them, so the keys mean the
// same everywhere. No identity configured: no option (an unauthenticated
// NATS, the development setup). Errors never show a secret.
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
