package cli

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/graygate/graygate/gateway/internal/proxy/admin"
)

// The admin API's refusals advise in HTTP terms ("send \"status\":
// \"active\" …", "read GET /admin/rollouts …") for its HTTP clients; a
// terminal gets the gateway rollout command that does it instead (issue
// 35: the CLI speaks the same language as the console).

// apiError returns the code and message of an OpenAI-style error
// envelope; ok is false when raw is not one.
func apiError(raw []byte) (code, msg string, ok bool) {
	var env struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &env) != nil || env.Error.Message == "" {
		return "", "", false
	}
	return env.Error.Code, env.Error.Message, true
}

// commandAdvice returns msg with the API's HTTP advice (what follows its
// first ": ") replaced by the gateway rollout command that would do it,
// for the refusals that advise; other messages are returned as they are.
// deployment is the one the call named ("" for a list).
func commandAdvice(code, msg, deployment string) string {
	d := deployment
	if d == "" {
		d = "DEPLOYMENT"
	}
	var advice string
	switch code {
	case admin.CodeRolledBack, admin.CodeTesting:
		advice = "resume it with `gateway rollout resume " + d + " --percentage N --reason TEXT`"
	case admin.CodeRevisionConflict:
		advice = "see `gateway rollout list`, then retry with that revision as --expected-revision (or without it)"
	case admin.CodeNothingToReaffirm:
		advice = "set one with `gateway rollout resume " + d + " --percentage N --reason TEXT` (or `gateway rollout rollback " + d + " --reason TEXT`)"
	case admin.CodeUnknownDeployment:
		return msg + " (`gateway rollout list` shows the deployments with a gray)"
	default:
		return msg
	}
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[:i]
	}
	return msg + ": " + advice
}

// deploymentOf returns the deployment a rollout call's URL names
// (…/admin/rollouts/{deployment}[/reaffirm]), or "".
func deploymentOf(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(u.EscapedPath(), "/admin/rollouts/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(rest, "/")
	d, err := url.PathUnescape(seg)
	if err != nil {
		return ""
	}
	return d
}
