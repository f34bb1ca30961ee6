package params

import (
	"errors"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
)

func TestRead(t *testing.T) {
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error {
		q, err := Read(c, []string{"limit", "cursor"}, func(param, msg string) error { return errors.New(param + ": " + msg) })
		if err != nil {
			return c.SendString("error " + err.Error())
		}
		return c.SendString("limit=" + q["limit"] + " cursor=" + q["cursor"])
	})
	for query, want := range map[string]string{
		"?limit=5":            "limit=5 cursor=",
		"?limit=5&cursor=x":   "limit=5 cursor=x",
		"?limit=5&limit=6":    "error limit: given more than once",
		"?since=1h&limit=5":   "error since: unknown parameter (known: limit, cursor)",
		"?limit=1&since=&x=1": "error since: unknown parameter (known: limit, cursor)",
	} {
		resp, err := app.Test(httptest.NewRequest("GET", "/"+query, nil))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want {
			t.Errorf("%s: %q, want %q", query, b, want)
		}
	}
}
