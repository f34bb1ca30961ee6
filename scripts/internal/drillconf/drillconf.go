// Package drillconf writes the configuration every service of the two
// fault drills reads (scripts/devenv soak, scripts/drill): one gateway
// route to one deployment whose primary and gray are the drill's mocks, a
// 20 % canary with the agent-action response schema, the sampling
// contract's temperature band, every request's event logged, and an
// analyzer and collector that act within seconds. The drills differ only
// in the NATS section, the tokens and the signing keys.
package drillconf

import (
	"bytes"
	"os"
	"path/filepath"
	"text/template"
)

// Service is what one service's file says; empty strings leave a line
// out where it is optional.
type Service struct {
	// Comment is the file's first line, after "# written by ".
	Comment string
	// NATS is the whole `nats:` section, YAML ending in a newline.
	NATS     string
	Postgres string // postgres.url
	// Listen, Admin and Spool are the gateway's; replicas of a drill
	// differ in them.
	Listen, Admin, Spool string
	AdminToken           string
	// RolloutSigningKeyFile is the gateway's seed file; "" for unsigned
	// rollout events.
	RolloutSigningKeyFile string
	Deployment            string
	// Primary and Gray are the mocks' base URLs.
	Primary, Gray string
	// Root is the repository, for the response schema.
	Root string
	// Analyzer is the analyzer's listener; LeaseTTL and SigningKeyFile
	// are left out when "".
	Analyzer, LeaseTTL, AnalyzerSigningKeyFile string
	Collector, APIToken                        string
}

// serviceTemplate is the file; the schema path comes from Root.
var serviceTemplate = template.Must(template.New("service").Parse(`# written by {{.Comment}}
{{.NATS}}postgres: {url: "{{.Postgres}}"}
gateway:
  listen: {{.Listen}}
  admin_listen: {{.Admin}}
  spool_dir: {{.Spool}}
  request_log: all # the drill counts every request's event
  admin_token: {{.AdminToken}}
{{with .RolloutSigningKeyFile}}  rollout_signing_key_file: {{.}}
{{end}}  rollout_stale_after: 60s
sampling_contract:
  conflict: reject
  params:
    temperature: {min: 0.0, max: 1.0, default: 0.7}
routing:
  routes:
    - model: agent-chat
      candidates: [{deployment: {{.Deployment}}}]
deployments:
  {{.Deployment}}:
    primary: {url: {{.Primary}}, model: qwen-v1, timeout: 10s}
    gray: {url: {{.Gray}}, model: qwen-v2}
    rollout:
      percentage: 20
      timeout: 2500ms
      response_schema: {{.Schema}}
analyzer:
  listen: {{.Analyzer}}
  spool_dir: {{.Spool}}-analyzer
{{with .LeaseTTL}}  lease_ttl: {{.}}
{{end}}{{with .AnalyzerSigningKeyFile}}  signing_key_file: {{.}}
{{end}}  interval: 1s
  window: 1m
  min_requests: 50
collector:
  listen: {{.Collector}}
  api_token: {{.APIToken}}
  flush_interval: 100ms
`))

// Schema is the response schema the rollout checks gray's answers
// against.
func (s Service) Schema() string {
	return filepath.Join(s.Root, "schemas/contracts/agent-action.schema.json")
}

// Write writes s's configuration file at path, readable by its owner
// only (it holds tokens).
func (s Service) Write(path string) error {
	var b bytes.Buffer
	if err := serviceTemplate.Execute(&b, s); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}
