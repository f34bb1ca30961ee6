package proxy

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/graygate/graygate/gateway/internal/proxy/apierr"
)

// model serves GET /v1/models/{model}: one route model in the OpenAI
// model object format, as the SDKs' models.retrieve expects, or 404
// model_not_found. A model name may hold slashes ("org/name"), sent as
// they are or escaped.
func (s *Server) model(c *fiber.Ctx) error {
	if _, err := s.authorize(c); err != nil {
		return err
	}
	raw, _ := strings.CutPrefix(string(c.Request().URI().PathOriginal()), "/v1/models/")
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	name, err := url.PathUnescape(raw)
	if err != nil {
		name = raw
	}
	rt, ok := s.routes[name]
	if !ok {
		return &apierr.Error{Status: fiber.StatusNotFound, Code: apierr.CodeModelNotFound, Type: "invalid_request_error",
			Param: "model", Msg: "The model " + apierr.QuoteShort([]byte(name)) + " does not exist (GET /v1/models lists the models)"}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(rt.Model)
}
