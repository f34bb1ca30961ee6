package publish

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/graygate/graygate/schemas/config"
	"github.com/nats-io/nats.go"
)

// Connect dials NATS for the gateway. It does not wait for the server:
// when NATS is down it returns a connection that keeps trying in the
// background (forever, every half second), so the gateway starts and
// serves without its event log. The reconnect buffer is off — while
// disconnected, publishes fail at once and the Publisher spools them. A
// dead server is noticed within about 15 seconds without a closed socket
// (pings), or within 2 seconds of a write the network does not take. The
// caller closes the connection.
// opts carry the gateway's NATS identity and TLS (config.NATS.ConnectOptions).
func Connect(url, name string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nc, err := nats.Connect(url, append([]nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(config.PingInterval),
		nats.MaxPingsOutstanding(config.MaxPingsOutstanding),
		// A write the network does not take within 2 s ends the
		// connection: the client holds its lock while it writes, so a
		// longer stall would stall the publisher's loop with it.
		nats.FlusherTimeout(2 * time.Second),
		nats.ReconnectOnFlusherError(),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("NATS error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("NATS error", "err", err)
		}),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %v", redact(url), redact(err.Error()))
	}
	return nc, nil
}

// redact removes credentials from URLs in a text: a URL is never printed
// with its credentials (SPEC §11).
func redact(s string) string { return config.RedactURLs(config.RedactURL(s)) }
