package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/graygate/graygate/schemas/events"
)

// The gateway's admin API as the console calls it (SPEC §3): who a token
// belongs to, and rollout changes made with an operator's own token.
const (
	whoamiTimeout = 5 * time.Second
	changeTimeout = 15 * time.Second // the gateway gives a change 10 s
	// maxAdminAnswer caps what is read of an admin API answer.
	maxAdminAnswer = 1 << 20
)

// adminError is an admin API answer other than 200.
type adminError struct {
	Status  int
	Code    string
	Message string
}

func (e *adminError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("the gateway answered %d %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("the gateway answered %d: %s", e.Status, e.Message)
}

// adminClient calls the admin API at base (collector.console.admin_url).
type adminClient struct {
	base string
	hc   *http.Client
}

// call sends one request with token and decodes a 200 answer into out.
func (a *adminClient) call(ctx context.Context, method, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := a.hc.Do(req)
	if err != nil {
		// The URL error names the URL, never the header.
		return fmt.Errorf("%w: %w", errUnreachable, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer+1))
	if err != nil {
		return fmt.Errorf("%w: read the answer: %v", errUnreachable, err)
	}
	if len(raw) > maxAdminAnswer {
		return fmt.Errorf("%w: the answer is larger than %d bytes", errUnreachable, maxAdminAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		e := &adminError{Status: resp.StatusCode}
		var env struct {
			Error struct {
				Message string `json:"message"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
		return e
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: the answer is not the admin API's JSON: %v", errUnreachable, err)
	}
	return nil
}

// whoami returns the operator token belongs to (GET /admin/whoami): ""
// for the gateway's shared admin token; an *adminError with status 401
// for a token the gateway does not know.
func (a *adminClient) whoami(ctx context.Context, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, whoamiTimeout)
	defer cancel()
	var out struct {
		Operator *string `json:"operator"`
	}
	if err := a.call(ctx, http.MethodGet, "/admin/whoami", token, nil, &out); err != nil {
		return "", err
	}
	if out.Operator == nil {
		return "", fmt.Errorf("%w: /admin/whoami answered without an operator", errUnreachable)
	}
	return *out.Operator, nil
}

// change appends a rollout change with token (PUT /admin/rollouts/{d})
// and returns the resulting entry.
func (a *adminClient) change(ctx context.Context, token, deployment string, ch events.RolloutChange) (events.RolloutEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, changeTimeout)
	defer cancel()
	var entry events.RolloutEntry
	err := a.call(ctx, http.MethodPut, "/admin/rollouts/"+url.PathEscape(deployment), token, ch, &entry)
	return entry, err
}

// rollout returns deployment's entry of GET /admin/rollouts.
func (a *adminClient) rollout(ctx context.Context, token, deployment string) (events.RolloutEntry, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, whoamiTimeout)
	defer cancel()
	var out struct {
		Rollouts []events.RolloutEntry `json:"rollouts"`
	}
	if err := a.call(ctx, http.MethodGet, "/admin/rollouts", token, nil, &out); err != nil {
		return events.RolloutEntry{}, false, err
	}
	for _, e := range out.Rollouts {
		if e.Deployment == deployment {
			return e, true, nil
		}
	}
	return events.RolloutEntry{}, false, nil
}
