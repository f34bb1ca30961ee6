package console

import (
	"bufio"
	"net"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// A wrong token is answered after failDelay (SPEC §8 rev. 4: "after a
// delay that holds no goroutine"), so a client that guesses one token
// after another guesses at most one a second. The handler renders the
// 401 page as usual; later then takes the answer out of fasthttp's hands:
// the connection is hijacked with nothing written, the server keeps it
// open (api.New sets KeepHijackedConns), and a timer writes the page and
// closes the connection once the delay is over. Waiting holds a timer, a
// connection and the page's bytes, never a goroutine; at most maxDelayed
// answers wait at once, and more are answered at once (the limiter
// refuses their source and token prefix for the same delay anyway).
const (
	maxDelayed = 1024
	// delayedWriteTimeout bounds the write of a delayed answer to a
	// client that no longer reads.
	delayedWriteTimeout = 5 * time.Second
)

// delayer sends answers later. The zero value is ready; off answers at
// once (Options.AnswerAtOnce).
type delayer struct {
	off     bool
	waiting atomic.Int64
}

// later arranges for c's response, as it stands, to be sent after d and
// the connection closed; it reports false, and c is answered at once as
// usual, when it is off or maxDelayed answers wait already.
func (dl *delayer) later(c *fiber.Ctx, d time.Duration) bool {
	if dl.off {
		return false
	}
	if dl.waiting.Add(1) > maxDelayed {
		dl.waiting.Add(-1)
		return false
	}
	resp := fasthttp.AcquireResponse()
	c.Response().CopyTo(resp)
	resp.SetConnectionClose()
	fc := c.Context()
	fc.HijackSetNoResponse(true)
	fc.Hijack(func(conn net.Conn) {
		time.AfterFunc(d, func() {
			defer dl.waiting.Add(-1)
			defer fasthttp.ReleaseResponse(resp)
			_ = conn.SetWriteDeadline(time.Now().Add(delayedWriteTimeout))
			w := bufio.NewWriter(conn)
			if resp.Write(w) == nil {
				_ = w.Flush()
			}
			_ = conn.Close()
		})
	})
	return true
}
