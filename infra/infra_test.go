// Package infra_test checks the deployment material under infra/: every YAML
// and JSON file parses, the graygate configurations of the compose file and
// the Kubernetes ConfigMap load with the project's own loader, the manifests
// wire what the configurations need, and every metric (and label) the
// Prometheus alerts and the Grafana dashboard reference exists in live
// /metrics scrapes of the built gateway, collector and analyzer.
//
// The gateway and the analyzer run against a private in-process NATS
// JetStream server, so that part always runs. The collector needs Postgres
// (DATABASE_URL, default the local server as user postgres): when it is
// unreachable that part is skipped with a message, unless CI is set, in
// which case the test fails.
package infra_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/graygate/graygate/schemas/config"
	"github.com/graygate/graygate/scripts/testenv"
)

// infraDir is the directory of this file (infra/); repoRoot its parent.
func infraDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate infra_test.go")
	}
	return filepath.Dir(file)
}

func repoRoot(t testing.TB) string { return filepath.Dir(infraDir(t)) }

// yamlDocs decodes every document of a (multi-document) YAML file.
func yamlDocs(t testing.TB, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, len(docs), err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// TestFilesParse decodes every YAML and JSON file under infra/.
func TestFilesParse(t *testing.T) {
	dir := infraDir(t)
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yml", ".yaml":
			n++
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			dec := yaml.NewDecoder(bytes.NewReader(data))
			for i := 0; ; i++ {
				var v any
				err := dec.Decode(&v)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Errorf("%s: YAML document %d: %v", rel, i, err)
					break
				}
			}
		case ".json":
			n++
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var v any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Errorf("%s: JSON: %v", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found only %d YAML/JSON files under infra/", n)
	}
}

// comment matches a YAML comment (the configs have no '#' inside values).
var comment = regexp.MustCompile(`(?m)(^|\s)#.*$`)

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// neededVars returns the variables a graygate config references with
// ${VAR}, plus those named by api_key_env.
func neededVars(data []byte) []string {
	data = comment.ReplaceAll(data, nil)
	seen := map[string]bool{}
	for _, m := range envRef.FindAllSubmatch(data, -1) {
		seen[string(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`(?m)api_key_env:\s*([A-Za-z_][A-Za-z0-9_]*)`).FindAllSubmatch(data, -1) {
		seen[string(m[1])] = true
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// loadConfig runs the project's loader on data. Relative response_schema
// paths resolve against the repository root, which stands for the image's
// working directory /app (it holds schemas/contracts, see the Dockerfile).
func loadConfig(t *testing.T, name string, data []byte, vars []string) *config.Config {
	t.Helper()
	env := map[string]string{}
	for _, v := range vars {
		env[v] = placeholder(v)
	}
	// URL-valued variables must be URLs.
	for k := range env {
		if strings.HasSuffix(k, "_URL") {
			env[k] = "http://upstream.test:8000/v1"
		}
	}
	// The variables the config names by key rather than ${}: the NATS
	// password and the client and force tokens.
	for _, k := range []string{"NATS_PASSWORD", "GRAYGATE_CLIENT_TOKENS", "GRAYGATE_FORCE_TOKENS"} {
		env[k] = placeholder(k)
	}
	data = withSigningKeys(t, data, env)
	cfg, warnings, err := config.Parse(data, repoRoot(t), func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	for _, w := range warnings {
		// The shipped deployments serve agent actions (short structured
		// answers validated against agent-action.schema.json) in buffer
		// mode under a 2.5 s rollout timeout: gray serves no stream longer
		// than that, which validate points out (SPEC §12 rev. 3
		// "streams"), and which is the intended trade-off for that
		// traffic (docs/gray-release.md: which mode for which traffic).
		if strings.HasSuffix(w.Path, ".rollout.stream_validation") && strings.Contains(w.String(), "buffer with timeout 2.5s") {
			continue
		}
		// For the same short answers a TTFT p99 well under half that
		// timeout is expected; validate points out that a fleet whose
		// TTFT p99 ttft_p99_max (2.5 s) still accepts, above 1.25 s,
		// could not pass ttft_p99_ratio (SPEC §9 rev. 4; issue 34 item
		// 7). Operators with longer first tokens raise the timeout.
		if w.Path == "analyzer.gates.ttft_p99_ratio_max" && strings.Contains(w.String(), "(2.5s)") &&
			strings.Contains(w.String(), "where primary's TTFT p99 is above 1.25s") {
			continue
		}
		t.Errorf("%s: warning: %v", name, w)
	}
	if err != nil {
		t.Fatalf("%s does not load:\n%v", name, err)
	}
	return cfg
}

func checkListen(t *testing.T, name string, cfg *config.Config, want map[string]string) {
	t.Helper()
	got := map[string]string{
		"gateway.listen":       cfg.Gateway.Listen,
		"gateway.admin_listen": cfg.Gateway.AdminListen,
		"collector.listen":     cfg.Collector.Listen,
		"analyzer.listen":      cfg.Analyzer.Listen,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s = %q, want %q", name, k, got[k], w)
		}
	}
}

var podPorts = map[string]string{
	"gateway.listen":       "0.0.0.0:8080",
	"gateway.admin_listen": "0.0.0.0:8081",
	"collector.listen":     "0.0.0.0:8082",
	"analyzer.listen":      "0.0.0.0:8083",
}

// TestComposeConfig loads compose/graygate.yaml and checks that the compose
// file passes every variable it references to each graygate service and
// mounts files that exist.
func TestComposeConfig(t *testing.T) {
	dir := infraDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "compose", "graygate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vars := neededVars(data)
	cfg := loadConfig(t, "compose/graygate.yaml", data, vars)
	checkListen(t, "compose/graygate.yaml", cfg, podPorts)
	if cfg.NATS.URL != "tls://nats:4222" {
		t.Errorf("compose nats.url = %q, want the compose service nats over TLS", cfg.NATS.URL)
	}

	docs := yamlDocs(t, filepath.Join(dir, "docker-compose.yml"))
	if len(docs) != 1 {
		t.Fatalf("docker-compose.yml: %d documents", len(docs))
	}
	services, _ := docs[0]["services"].(map[string]any)
	for _, want := range []string{"nats", "postgres", "migrate", "collector", "gateway", "gateway-2", "analyzer"} {
		if services[want] == nil {
			t.Errorf("docker-compose.yml: no service %q", want)
		}
	}
	if img, _ := services["nats"].(map[string]any)["image"].(string); !strings.HasPrefix(img, "nats:2.10") {
		t.Errorf("nats image %q, want nats:2.10", img)
	}
	if cmd := fmt.Sprint(services["nats"].(map[string]any)["command"]); !strings.Contains(cmd, "nats-server.conf") {
		t.Errorf("nats command %s does not run infra/nats/nats-server.conf (JetStream, TLS, identities)", cmd)
	}
	if img, _ := services["postgres"].(map[string]any)["image"].(string); !strings.HasPrefix(img, "postgres:16") {
		t.Errorf("postgres image %q, want postgres:16", img)
	}
	for _, name := range []string{"migrate", "collector", "gateway", "gateway-2", "analyzer"} {
		svc, _ := services[name].(map[string]any)
		if svc == nil {
			continue
		}
		// Each service gets only its own variables; TestComposeSecurity
		// loads the config as each with exactly those.
		build, _ := svc["build"].(map[string]any)
		if build == nil {
			t.Errorf("service %s has no build section", name)
		} else if df := filepath.Join(dir, fmt.Sprint(build["context"]), fmt.Sprint(build["dockerfile"])); !fileExists(df) {
			t.Errorf("service %s: dockerfile %s does not exist", name, df)
		}
		cmd := fmt.Sprint(svc["command"])
		if !strings.Contains(cmd, "/etc/graygate/graygate.yaml") {
			t.Errorf("service %s: command %s does not name the mounted config", name, cmd)
		}
		vols, _ := svc["volumes"].([]any)
		mounted := false
		for _, v := range vols {
			if m, ok := v.(map[string]any); ok && m["target"] == "/etc/graygate/graygate.yaml" {
				mounted = true
				if src := filepath.Join(dir, fmt.Sprint(m["source"])); !fileExists(src) {
					t.Errorf("service %s mounts %s, which does not exist", name, src)
				}
			}
		}
		if !mounted {
			t.Errorf("service %s does not mount the config", name)
		}
	}
	if cmd := fmt.Sprint(services["migrate"].(map[string]any)["command"]); !strings.Contains(cmd, "collector migrate") {
		t.Errorf("migrate runs %s", cmd)
	}
	dep := fmt.Sprint(services["collector"].(map[string]any)["depends_on"])
	if !strings.Contains(dep, "migrate") || !strings.Contains(dep, "service_completed_successfully") {
		t.Errorf("collector does not wait for migrate: %s", dep)
	}
	// The Dockerfile builds the three binaries.
	df, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"./gateway", "./collector", "./analyzer", "USER 65532", "/app/schemas/contracts"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// k8sObjects returns every object of every manifest under k8s/, keyed
// "Kind/name".
func k8sObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(infraDir(t), "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under infra/k8s: %v", err)
	}
	objs := map[string]map[string]any{}
	for _, f := range files {
		for _, doc := range yamlDocs(t, f) {
			kind, _ := doc["kind"].(string)
			meta, _ := doc["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			if kind == "" || name == "" {
				if kind != "Kustomization" {
					t.Errorf("%s: object without kind or metadata.name", filepath.Base(f))
				}
				continue
			}
			if kind != "Namespace" && meta["namespace"] != "graygate" {
				t.Errorf("%s %s/%s is not in namespace graygate", filepath.Base(f), kind, name)
			}
			objs[kind+"/"+name] = doc
		}
	}
	return objs
}

// dig walks nested maps and lists: keys are map keys, ints list indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func asInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return -1
}

// containerEnv lists the variables a container sets.
func containerEnv(c any) map[string]bool {
	out := map[string]bool{}
	env, _ := dig(c, "env").([]any)
	for _, e := range env {
		if n, ok := dig(e, "name").(string); ok {
			out[n] = true
		}
	}
	return out
}

// TestK8s loads the ConfigMap's config and checks the manifests against it.
func TestK8s(t *testing.T) {
	objs := k8sObjects(t)
	cm := objs["ConfigMap/graygate-config"]
	data, _ := dig(cm, "data", "graygate.yaml").(string)
	if data == "" {
		t.Fatal("ConfigMap graygate-config has no graygate.yaml")
	}
	vars := neededVars([]byte(data))
	cfg := loadConfig(t, "ConfigMap graygate-config", []byte(data), vars)
	checkListen(t, "ConfigMap", cfg, podPorts)
	if cfg.NATS.Replicas != 3 {
		t.Errorf("ConfigMap: nats.replicas = %d, want 3 (R3 streams)", cfg.NATS.Replicas)
	}
	if u, err := url.Parse(cfg.NATS.URL); err != nil || !strings.HasPrefix(u.Host, "nats.graygate.svc") {
		t.Errorf("ConfigMap: nats.url %q does not name the nats Service", cfg.NATS.URL)
	}

	secret := objs["Secret/graygate"]
	keys, _ := dig(secret, "stringData").(map[string]any)
	for _, k := range append([]string{"GRAYGATE_ADMIN_TOKEN", "GRAYGATE_API_TOKEN", "DATABASE_URL", "GRAYGATE_CLIENT_TOKENS", "GRAYGATE_FORCE_TOKENS"}, vars...) {
		if k == "NATS_USER" {
			continue // not a secret: each pod names its identity (TestK8sSecurity)
		}
		if _, ok := keys[k]; !ok {
			t.Errorf("Secret template lacks key %s", k)
		}
		if v, _ := keys[k].(string); v != "" {
			t.Errorf("Secret template carries a value for %s; it must be a template", k)
		}
	}

	workloads := map[string]string{"gateway": "Deployment/gateway", "collector": "Deployment/collector", "analyzer": "StatefulSet/analyzer"}
	for name, key := range workloads {
		obj := objs[key]
		if obj == nil {
			t.Errorf("no %s", key)
			continue
		}
		c := dig(obj, "spec", "template", "spec", "containers", 0)
		// Each service gets only its own variables: TestK8sSecurity loads
		// the config as each with exactly its container's.
		args := fmt.Sprint(dig(c, "args"))
		if !strings.Contains(args, name+" serve") || !strings.Contains(args, "/etc/graygate/graygate.yaml") {
			t.Errorf("%s runs %s", key, args)
		}
		if dig(c, "resources", "requests") == nil || dig(c, "resources", "limits") == nil {
			t.Errorf("%s: no resource requests/limits", key)
		}
		if dig(obj, "spec", "template", "spec", "volumes", 0, "configMap", "name") != "graygate-config" {
			t.Errorf("%s does not mount ConfigMap graygate-config", key)
		}
		if dig(obj, "spec", "template", "spec", "affinity", "podAntiAffinity") == nil {
			t.Errorf("%s: no pod anti-affinity", key)
		}
	}
	gw := objs["Deployment/gateway"]
	if r := asInt(dig(gw, "spec", "replicas")); r < 2 {
		t.Errorf("gateway replicas = %d, want at least 2", r)
	}
	c := dig(gw, "spec", "template", "spec", "containers", 0)
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if dig(c, probe, "httpGet", "path") != path || dig(c, probe, "httpGet", "port") != "admin" {
			t.Errorf("gateway %s: %v, want GET %s on admin", probe, dig(c, probe), path)
		}
	}
	ports := fmt.Sprint(dig(c, "ports"))
	if !strings.Contains(ports, "containerPort:8081") || !strings.Contains(ports, "name:admin") {
		t.Errorf("gateway ports %s lack admin 8081", ports)
	}
	if g := asInt(dig(gw, "spec", "template", "spec", "terminationGracePeriodSeconds")); g < 45 {
		t.Errorf("gateway terminationGracePeriodSeconds = %d: too short to drain (preStop + 30s drain + flush)", g)
	}
	if dig(c, "lifecycle", "preStop") == nil {
		t.Error("gateway has no preStop")
	}
	if !envHasAll(containerEnv(c), "GRAYGATE_ADMIN_TOKEN") {
		t.Error("gateway does not get GRAYGATE_ADMIN_TOKEN")
	}
	if p := dig(objs["Service/graygate"], "spec", "ports", 0, "port"); asInt(p) != 8080 {
		t.Errorf("Service graygate port %v, want 8080", p)
	}
	if p := dig(objs["Service/graygate-admin"], "spec", "ports", 0, "port"); asInt(p) != 8081 {
		t.Errorf("Service graygate-admin port %v, want 8081", p)
	}
	col := objs["Deployment/collector"]
	init := dig(col, "spec", "template", "spec", "initContainers", 0)
	if a := fmt.Sprint(dig(init, "args")); !strings.Contains(a, "collector migrate") {
		t.Errorf("collector initContainer runs %s, want collector migrate", a)
	}
	if !envHasAll(containerEnv(init), "DATABASE_URL") || !envHasAll(containerEnv(dig(col, "spec", "template", "spec", "containers", 0)), "DATABASE_URL", "GRAYGATE_API_TOKEN") {
		t.Error("collector containers lack DATABASE_URL / GRAYGATE_API_TOKEN")
	}
	ns := objs["StatefulSet/nats"]
	if asInt(dig(ns, "spec", "replicas")) != 3 || dig(ns, "spec", "serviceName") != "nats-headless" {
		t.Errorf("NATS StatefulSet: replicas %v, serviceName %v", dig(ns, "spec", "replicas"), dig(ns, "spec", "serviceName"))
	}
	if dig(objs["Service/nats-headless"], "spec", "clusterIP") != "None" {
		t.Error("nats-headless is not headless")
	}
	conf, _ := dig(objs["ConfigMap/nats-config"], "data", "nats.conf").(string)
	for _, want := range []string{"jetstream", "cluster", "nats-0.nats-headless", "nats-1.nats-headless", "nats-2.nats-headless", "pid_file"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats.conf lacks %q", want)
		}
	}
	// The kustomization names files that exist.
	kdocs := yamlDocs(t, filepath.Join(infraDir(t), "k8s", "kustomization.yaml"))
	res, _ := kdocs[0]["resources"].([]any)
	for _, r := range res {
		if !fileExists(filepath.Join(infraDir(t), "k8s", fmt.Sprint(r))) {
			t.Errorf("kustomization names %v, which does not exist", r)
		}
	}
}

func envHasAll(env map[string]bool, names ...string) bool {
	for _, n := range names {
		if !env[n] {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Metrics referenced by the alerts and the dashboard, against live scrapes.

// exprs returns every PromQL expression of the alert rules and the dashboard.
func exprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	seen := map[string]bool{}
	for i, doc := range yamlDocs(t, filepath.Join(infraDir(t), "prometheus", "alerts.yml")) {
		groups, _ := doc["groups"].([]any)
		for _, g := range groups {
			rules, _ := dig(g, "rules").([]any)
			for _, r := range rules {
				name := fmt.Sprint(dig(r, "alert"))
				e, _ := dig(r, "expr").(string)
				if e == "" || dig(r, "alert") == nil {
					t.Errorf("alerts.yml doc %d: rule %v without alert name or expr", i, name)
					continue
				}
				if dig(r, "annotations", "summary") == nil {
					t.Errorf("alert %s has no summary", name)
				}
				if sev, _ := dig(r, "labels", "severity").(string); sev != "critical" && sev != "warning" && sev != "info" {
					t.Errorf("alert %s: severity %q, want critical, warning or info", name, sev)
				}
				if f, ok := dig(r, "for").(string); ok {
					if _, err := time.ParseDuration(f); err != nil {
						t.Errorf("alert %s: for %q: %v", name, f, err)
					}
				}
				if err := balanced(e); err != nil {
					t.Errorf("alert %s: expr: %v", name, err)
				}
				if seen[name] {
					t.Errorf("alert %s defined twice", name)
				}
				seen[name] = true
				out["alert "+name] = e
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(infraDir(t), "grafana", "graygate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					out["dashboard "+path+"."+k] = s
					continue
				}
				if k == "query" {
					if s, ok := c.(string); ok && strings.Contains(s, "graygate_") {
						out["dashboard "+path+".query"] = s
						continue
					}
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range x {
				title := ""
				if m, ok := c.(map[string]any); ok && m["title"] != nil {
					title = fmt.Sprintf("(%v)", m["title"])
				}
				walk(fmt.Sprintf("%s[%d]%s", path, i, title), c)
			}
		}
	}
	walk("", dash)
	checkDashboard(t, dash)
	for w, e := range out {
		if strings.HasPrefix(w, "dashboard") {
			if err := balanced(e); err != nil {
				t.Errorf("%s: %v", w, err)
			}
		}
	}
	if len(out) < 30 {
		t.Fatalf("found only %d expressions in alerts and dashboard", len(out))
	}
	return out
}

var (
	metricRef  = regexp.MustCompile(`\bgraygate_[A-Za-z0-9_]+`)
	matcherRef = regexp.MustCompile(`\b(graygate_[A-Za-z0-9_]+)\{([^}]*)\}`)
	labelName  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)
	groupRef   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// family is one metric family of a scrape: its type and label names.
type family struct {
	typ    string
	labels map[string]bool
}

// parseScrape adds the families of a Prometheus text exposition to fams.
func parseScrape(fams map[string]*family, text string) {
	get := func(n string) *family {
		f := fams[n]
		if f == nil {
			f = &family{labels: map[string]bool{}}
			fams[n] = f
		}
		return f
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			parts := strings.Fields(line)
			if len(parts) == 4 {
				get(parts[2]).typ = parts[3]
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		labels := ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				if j := strings.LastIndexByte(line, '}'); j > i {
					labels = line[i+1 : j]
				}
			}
		}
		f := get(name)
		for _, m := range regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="`).FindAllStringSubmatch(labels, -1) {
			f.labels[m[1]] = true
		}
	}
}

// resolve maps a referenced series name to its family: itself, or the
// histogram/summary it is a _bucket/_sum/_count series of.
func resolve(fams map[string]*family, name string) (string, bool) {
	if f, ok := fams[name]; ok {
		// A Prometheus histogram has no series of its bare name.
		return name, f.typ != "histogram" && f.typ != "summary"
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f, ok := fams[base]; ok && (f.typ == "histogram" || f.typ == "summary") {
				return base, true
			}
		}
	}
	return "", false
}

// checkReferences fails for every metric or label an expression names that
// the scrapes do not have.
func checkReferences(t *testing.T, fams map[string]*family, all map[string]string, skip func(string) bool) {
	t.Helper()
	var where []string
	for w := range all {
		where = append(where, w)
	}
	sort.Strings(where)
	checked := 0
	for _, w := range where {
		e := all[w]
		var used []string
		for _, name := range metricRef.FindAllString(e, -1) {
			if skip(name) {
				continue
			}
			checked++
			fam, ok := resolve(fams, name)
			if !ok {
				t.Errorf("%s references %s, which no live /metrics scrape has", w, name)
				continue
			}
			used = append(used, fam)
		}
		// Label matchers on a metric must be labels of its family.
		for _, m := range matcherRef.FindAllStringSubmatch(e, -1) {
			fam, ok := resolve(fams, m[1])
			if !ok || skip(m[1]) {
				continue
			}
			for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
				if l[1] == "le" && strings.HasSuffix(m[1], "_bucket") {
					continue
				}
				if !fams[fam].labels[l[1]] {
					t.Errorf("%s matches label %q on %s, which has labels %v", w, l[1], m[1], keys(fams[fam].labels))
				}
			}
		}
		// Grouping labels must exist on some metric of the expression.
		if len(used) == 0 {
			continue
		}
		for _, g := range groupRef.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(g[1], ",") {
				l = strings.TrimSpace(l)
				if l == "" || l == "instance" || l == "job" || l == "le" {
					continue
				}
				found := false
				for _, fam := range used {
					found = found || fams[fam].labels[l]
				}
				if !found {
					t.Errorf("%s groups by %q, which none of %v has", w, l, used)
				}
			}
		}
	}
	t.Logf("checked %d metric references in %d expressions against %d live families", checked, len(all), len(fams))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestReferencedMetricsExist builds and runs the three binaries, drives
// traffic that creates the lazily created series (a gray fallback that
// triggers a rollback, a contract violation, a primary upstream error),
// scrapes their /metrics and checks every reference of the alerts and the
// dashboard.
func TestReferencedMetricsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the services; skipped with -short")
	}
	all := exprs(t)
	bin := buildBinaries(t)
	natsURL := testenv.StartNATS(t).URL
	up := startUpstreams(t)

	work := t.TempDir()
	gwPort, adminPort, anPort, colPort := freePort(t), freePort(t), freePort(t), freePort(t)
	cfgPath := filepath.Join(work, "graygate.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(testConfig, natsURL, gwPort, adminPort, filepath.Join(work, "spool"),
		up.primary, up.gray, up.broken, anPort, colPort))
	env := []string{"INFRA_TEST_KEY=k", "GRAYGATE_ADMIN_TOKEN=admin-token", "GRAYGATE_API_TOKEN=api-token", "GRAYGATE_FORCE_TOKENS=force-token"}

	// Analyzer first: it must be following the stream when the gray fails.
	startProcess(t, "analyzer", env, bin["analyzer"], "serve", "--config", cfgPath)
	anURL := fmt.Sprintf("http://127.0.0.1:%d", anPort)
	waitFor(t, "analyzer /readyz", 60*time.Second, func() error { return statusIs(anURL+"/readyz", 200) })

	startProcess(t, "gateway", env, bin["gateway"], "serve", "--config", cfgPath)
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	gwURL := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	waitFor(t, "gateway /readyz with the rollout log read", 60*time.Second, func() error {
		body, err := get(adminURL + "/readyz")
		if err != nil {
			return err
		}
		if body != "ready\n" {
			return fmt.Errorf("readyz: %q", body)
		}
		return nil
	})

	// The analyzer's window starts at the first whole bucket (1s here)
	// after a deployment turned active, which the gateway recorded when it
	// started: requests in that same second are not judged.
	time.Sleep(2 * time.Second)

	// Postgres for the collector, when there is one.
	collectorURL, collectorDB := "", ""
	if dbURL, why := database(t); dbURL != "" {
		collectorDB = dbURL
		cenv := append(env, "DATABASE_URL="+dbURL)
		cmd := exec.Command(bin["collector"], "migrate", "--config", cfgPath)
		cmd.Env = processEnv(cenv)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("collector migrate: %v\n%s", err, out)
		}
		startProcess(t, "collector", cenv, bin["collector"], "serve", "--config", cfgPath)
		collectorURL = fmt.Sprintf("http://127.0.0.1:%d", colPort)
		waitFor(t, "collector /readyz", 60*time.Second, func() error { return statusIs(collectorURL+"/readyz", 200) })
	} else {
		unavailable(t, why)
	}

	// Traffic: a primary answer, a forced gray attempt that answers invalid
	// JSON (fallback, sample, schema-drift rollback), a sampling-contract
	// violation, a context-length rejection and a failing primary.
	chat := func(model string, extra string, hdr map[string]string) int {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]` + extra + `}`
		req, _ := http.NewRequest("POST", gwURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
			if k == "X-Gray-Rollout" {
				req.Header.Set("Authorization", "Bearer force-token") // only testers may force an arm
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := chat("infra-chat", "", map[string]string{"X-Gray-Rollout": "false"}); s != 200 {
		t.Errorf("primary request: status %d", s)
	}
	if s := chat("infra-chat", "", map[string]string{"X-Gray-Rollout": "true"}); s != 200 {
		t.Errorf("gray request (should fall back to primary): status %d", s)
	}
	if s := chat("infra-chat", `,"temperature":0.2`, nil); s != 400 {
		t.Errorf("contract violation: status %d, want 400", s)
	}
	if s := chat("infra-chat", `,"max_tokens":100000`, nil); s != 400 {
		t.Errorf("context-length request: status %d, want 400", s)
	}
	if s := chat("infra-broken", "", nil); s < 500 {
		t.Errorf("failing primary: status %d, want 5xx", s)
	}

	// Gray and primary answers that pass every gate on infra-promote: the
	// analyzer promotes it from 10 to 20 %% after the 1s hold. A gate passes
	// only once its confidence bound is inside the threshold, and a p99's
	// upper bound needs about 1,700 answers per arm (analyzer README).
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				chat("infra-promote", "", map[string]string{"X-Gray-Rollout": "true"})
				chat("infra-promote", "", map[string]string{"X-Gray-Rollout": "false"})
			}
		}()
	}
	wg.Wait()

	// The analyzer rolls infra-chat back (schema drift: invalid JSON) and
	// promotes infra-promote; the gateway applies the rollback.
	anText := waitMetrics(t, "analyzer", anURL+"/metrics", 60*time.Second,
		"graygate_analyzer_rollbacks_total{", "graygate_analyzer_promotions_total{")
	gwText := waitMetrics(t, "gateway", adminURL+"/metrics", 30*time.Second,
		`graygate_rollout_status{deployment="infra-chat",status="rolled_back"} 1`,
		`graygate_fallbacks_total{deployment="infra-chat",reason="invalid_json"}`,
		`graygate_sampling_contract_rejections_total{param="temperature"}`)

	var colText string
	if collectorURL != "" {
		colURL := collectorURL + "/metrics"
		waitMetrics(t, "collector", colURL, 30*time.Second, "graygate_collector_events_written_total{",
			"graygate_collector_batch_duration_seconds_bucket{", "graygate_collector_consumer_pending{")
		// A stored event republished under a new JetStream message id gets
		// past JetStream's duplicate window: the collector counts it.
		republishFirst(t, natsURL, "GRAYGATE_EVENTS")
		waitMetrics(t, "collector", colURL, 30*time.Second, "graygate_collector_events_duplicate_total{")
		// A batch whose table is missing fails (and is redelivered later).
		sqlExec(t, collectorDB, "ALTER TABLE rejections RENAME TO rejections_hidden_by_infra_test")
		chat("infra-chat", `,"temperature":0.2`, nil)
		colText = waitMetrics(t, "collector", colURL, 30*time.Second, "graygate_collector_write_errors_total{")
	}
	// With GRAYGATE_ANALYSIS gone, the analyzer cannot publish evaluations.
	deleteStream(t, natsURL, "GRAYGATE_ANALYSIS")
	anText = waitMetrics(t, "analyzer", anURL+"/metrics", 30*time.Second, "graygate_analyzer_publish_errors_total{")

	fams := map[string]*family{}
	parseScrape(fams, gwText)
	parseScrape(fams, anText)
	// Without Postgres the collector's references are not checked (logged
	// above; a failure when CI is set).
	skip := func(name string) bool { return strings.HasPrefix(name, "graygate_collector_") }
	if colText != "" {
		parseScrape(fams, colText)
		skip = func(string) bool { return false }
	}
	checkReferences(t, fams, all, skip)
}

// waitMetrics polls a /metrics URL until its text contains every want, and
// returns that text.
func waitMetrics(t *testing.T, who, u string, timeout time.Duration, wants ...string) string {
	t.Helper()
	var text string
	waitFor(t, who+" /metrics with "+strings.Join(wants, ", "), timeout, func() error {
		var err error
		if text, err = get(u); err != nil {
			return err
		}
		for _, w := range wants {
			if !strings.Contains(text, w) {
				return fmt.Errorf("no %s yet; graygate series now:\n%s", w, grep(text, "graygate_"))
			}
		}
		return nil
	})
	return text
}

func jetStream(t *testing.T, natsURL string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// republishFirst publishes the first message of a stream again under a new
// Nats-Msg-Id (same event id inside).
func republishFirst(t *testing.T, natsURL, stream string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := jetStream(t, natsURL)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, st.CachedInfo().State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	for k, v := range m.Header {
		msg.Header[k] = v
	}
	msg.Header.Set(jetstream.MsgIDHeader, "infra-test-republished-"+testenv.Suffix())
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

func deleteStream(t *testing.T, natsURL, stream string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := jetStream(t, natsURL).DeleteStream(ctx, stream); err != nil {
		t.Fatal(err)
	}
}

func sqlExec(t *testing.T, dbURL, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

const testConfig = `
nats:
  url: %s
  replicas: 1
gateway:
  listen: 127.0.0.1:%d
  admin_listen: 127.0.0.1:%d
  spool_dir: %s
  rollout_stale_after: 60s
  # Every request's event, so the collector's series all appear.
  request_log: all
sampling_contract:
  conflict: reject
  params:
    temperature: {min: 0.5, max: 1.0, default: 0.7}
routing:
  signals:
    context:
      - name: short_context
        max_tokens: '8K'
      - name: long_context
        min_tokens: '8001'
  routes:
    - model: infra-chat
      candidates:
        - deployment: infra-chat
    - model: infra-broken
      candidates:
        - deployment: infra-broken
    - model: infra-promote
      candidates:
        - deployment: infra-promote
deployments:
  infra-chat:
    context_window: 4096
    primary: {url: %s, model: primary-model, api_key_env: INFRA_TEST_KEY}
    gray: {url: %s, model: gray-model}
    rollout:
      mode: canary
      percentage: 50
      sticky_key: none
      force_header: X-Gray-Rollout
      timeout: 2s
  infra-broken:
    primary: {url: %s, model: broken-model}
  infra-promote:
    primary: {url: %[5]s, model: primary-model}
    gray: {url: %[5]s, model: gray-model}
    rollout:
      mode: canary
      percentage: 10
      sticky_key: none
      timeout: 2s
analyzer:
  listen: 127.0.0.1:%[8]d
  spool_dir: %[4]s-analyzer
  interval: 500ms
  window: 1m
  min_requests: 1
  gates:
    token_inflation_max: 10
    schema_failure_rate_max: 0.0
    ttft_p99_max: 60s
    ttft_p99_ratio_max: 1000
    latency_p99_ratio_max: 1000
    tool_loop_ratio_max: 1
  promotion:
    steps: [10, 20]
    hold: 1s
collector:
  listen: 127.0.0.1:%[9]d
  flush_interval: 50ms
`

type upstreams struct{ primary, gray, broken string }

// startUpstreams serves a good primary, a gray whose answers are not JSON,
// and a primary that answers 500.
func startUpstreams(t *testing.T) upstreams {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"primary-model",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"{\"action\":\"answer\"}"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}`)
	}))
	t.Cleanup(good.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-2","choices":[{"index":0,"mess`)
	}))
	t.Cleanup(bad.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		io.WriteString(w, `{"error":{"message":"boom","type":"server_error"}}`)
	}))
	t.Cleanup(broken.Close)
	return upstreams{good.URL, bad.URL, broken.URL}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// buildBinaries builds gateway, collector and analyzer once per process.
func buildBinaries(t *testing.T) map[string]string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "graygate-infra-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+string(filepath.Separator), "./gateway", "./collector", "./analyzer")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return map[string]string{
		"gateway":   filepath.Join(buildDir, "gateway"),
		"collector": filepath.Join(buildDir, "collector"),
		"analyzer":  filepath.Join(buildDir, "analyzer"),
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// database creates a fresh database on DATABASE_URL's server (default the
// local Postgres as user postgres) and returns its URL, dropped at the end;
// or "" and why there is none.
func database(t *testing.T) (string, string) {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "DATABASE_URL is not a postgres:// URL; the collector part needs one"
	}
	admin := *u
	admin.Path = "/postgres"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return "", fmt.Sprintf("Postgres unreachable (%v): the collector's metrics are not checked; set DATABASE_URL or start Postgres", err)
	}
	defer conn.Close(context.Background())
	name := "graygate_infra_test_" + testenv.Suffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin.String()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	db := *u
	db.Path = "/" + name
	return db.String(), ""
}

// unavailable reports a missing service: a failure when CI is set, else a
// log line saying which part is skipped (the rest of the test still runs).
func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", why)
	}
	t.Logf("SKIP collector part: %s", why)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer collects a process's output for failure reports.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProcess runs a binary until the test ends (SIGTERM, then kill); its
// output is printed when the test failed.
func startProcess(t *testing.T, name string, env []string, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = processEnv(env)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
}

// processEnv is the test's environment without the variables that would
// override the test config (NATS_URL would point the services at another
// NATS than the private one), plus env.
func processEnv(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "NATS_URL", "DATABASE_URL", "GRAYGATE_ADMIN_TOKEN", "GRAYGATE_API_TOKEN", "GRAYGATE_CLIENT_TOKENS":
			continue
		}
		out = append(out, kv)
	}
	return append(out, env...)
}

func get(u string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return string(b), nil
}

func statusIs(u string, want int) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	return nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, timeout, err)
}

// grep keeps the lines of s that contain sub and are not comments.
func grep(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// balanced checks that a PromQL expression's brackets pair up outside
// string literals and that its strings are closed.
func balanced(e string) error {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for i, r := range e {
		switch {
		case quote != 0:
			if r == quote && (i == 0 || e[i-1] != '\\') {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case r == ')' || r == ']' || r == '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return fmt.Errorf("unbalanced %q at offset %d in %s", r, i, e)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return fmt.Errorf("unclosed string or bracket in %s", e)
	}
	return nil
}

// checkDashboard checks the dashboard's structure: a uid and title, unique
// panel ids, panels inside the 24-column grid, every graph panel with a
// Prometheus data source and at least one query.
func checkDashboard(t *testing.T, dash map[string]any) {
	t.Helper()
	if dash["uid"] == nil || dash["title"] == nil {
		t.Error("dashboard has no uid or title")
	}
	panels, _ := dash["panels"].([]any)
	ids := map[int]bool{}
	for i, p := range panels {
		id := asInt(dig(p, "id"))
		if id <= 0 || ids[id] {
			t.Errorf("dashboard panel %d: id %d missing or repeated", i, id)
		}
		ids[id] = true
		x, w := asInt(dig(p, "gridPos", "x")), asInt(dig(p, "gridPos", "w"))
		if x < 0 || w <= 0 || x+w > 24 || asInt(dig(p, "gridPos", "h")) <= 0 {
			t.Errorf("dashboard panel %d (%v): gridPos %v outside the grid", i, dig(p, "title"), dig(p, "gridPos"))
		}
		if dig(p, "type") == "row" {
			continue
		}
		if dig(p, "datasource", "type") != "prometheus" {
			t.Errorf("dashboard panel %v: datasource %v", dig(p, "title"), dig(p, "datasource"))
		}
		if ts, _ := dig(p, "targets").([]any); len(ts) == 0 {
			t.Errorf("dashboard panel %v has no queries", dig(p, "title"))
		}
	}
}
