package proxy

import (
	"bytes"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/telemetry"
)

// metrics serves GET /metrics in the Prometheus text format.
func (s *Server) metrics(c *fiber.Ctx) error {
	var buf bytes.Buffer
	telemetry.WritePrometheus(&buf)
	c.Set(fiber.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	return c.Send(buf.Bytes())
}
