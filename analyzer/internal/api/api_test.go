package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/graygate/graygate/analyzer/internal/engine"
)

type source struct {
	ready bool
}

func (s source) Status() engine.Status {
	return engine.Status{Ready: s.ready, Source: "analyzer/test", Deployments: []engine.DeploymentStatus{{Evaluation: engine.Evaluation{Deployment: "d"}}}}
}

func (s source) NotReady() []string {
	if s.ready {
		return nil
	}
	return []string{engine.NotReadyReplaying}
}

func TestHandler(t *testing.T) {
	set := metrics.NewSet()
	set.GetOrCreateCounter(`graygate_analyzer_evaluations_total{deployment="d",verdict="pass"}`).Inc()
	help := map[string]string{"graygate_analyzer_evaluations_total": "Evaluations per deployment and overall verdict."}
	tests := []struct {
		name      string
		ready     bool
		connected bool
		path      string
		wantCode  int
		wantBody  []string
	}{
		{"healthz", false, false, "/healthz", 200, []string{"ok"}},
		{"readyz before the window is rebuilt", false, true, "/readyz", 503, []string{"not ready"}},
		{"readyz ready", true, true, "/readyz", 200, []string{"ready"}},
		{"readyz ready but NATS gone", true, false, "/readyz", 200, []string{"degraded: event log unreachable", "ready"}},
		{"status", true, true, "/v1/status", 200, []string{`"source": "analyzer/test"`, `"deployment": "d"`}},
		{"metrics", true, true, "/metrics", 200, []string{
			"# HELP graygate_analyzer_evaluations_total Evaluations per deployment and overall verdict.",
			"# TYPE graygate_analyzer_evaluations_total counter",
			`graygate_analyzer_evaluations_total{deployment="d",verdict="pass"} 1`,
			"go_goroutines",
		}},
		{"unknown path", true, true, "/admin", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Handler(source{ready: tt.ready}, set, help, func() bool { return tt.connected })
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.wantCode {
				t.Errorf("GET %s = %d; want %d", tt.path, rec.Code, tt.wantCode)
			}
			for _, want := range tt.wantBody {
				if !strings.Contains(string(body), want) {
					t.Errorf("GET %s body lacks %q:\n%s", tt.path, want, body)
				}
			}
			if tt.path == "/v1/status" {
				var s engine.Status
				if err := json.Unmarshal(body, &s); err != nil {
					t.Errorf("status is not JSON: %v", err)
				}
			}
		})
	}
}
