package proxy

import (
	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
)

// errorHandler is fiber's ErrorHandler for both listeners.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	e := apierr.As(err)
	if e.Status >= 500 {
		s.log.Warn("request failed", "path", c.Path(), "status", e.Status, "code", e.Code, "err", e.Error())
	} else {
		s.log.Debug("request refused", "path", c.Path(), "status", e.Status, "code", e.Code, "err", e.Error())
	}
	c.Set("x-router-error-code", e.Code)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(e.Status).Send(apierr.Marshal(e))
}
