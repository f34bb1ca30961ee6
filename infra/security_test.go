package infra_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nkeys"

	"github.com/graygate/graygate/schemas/config"
)

// The security of the shipped material, checked structurally (issue #14):
// every service reaches NATS with its own identity over TLS, gets only its
// own secrets, every image is pinned by digest, NATS' monitoring port is
// not exposed, and Kubernetes has NetworkPolicies and securityContexts.

var digestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

var serviceOf = map[string]config.Service{
	"gateway": config.ForGateway, "gateway-2": config.ForGateway,
	"collector": config.ForCollector, "migrate": config.ForCollector,
	"analyzer": config.ForAnalyzer,
}

// identityOf is the NATS identity each graygate service must use.
var identityOf = map[string]string{
	"gateway": "gateway", "gateway-2": "gateway", "collector": "collector", "migrate": "collector", "analyzer": "analyzer",
}

// notFor lists variables a service must not get: another service's
// secrets (SPEC §2).
var notFor = map[config.Service][]string{
	config.ForGateway:   {"DATABASE_URL", "POSTGRES_PASSWORD", "GRAYGATE_API_TOKEN", "NATS_ANALYZER_PASSWORD", "NATS_COLLECTOR_PASSWORD"},
	config.ForCollector: {"UPSTREAM_API_KEY", "PRIMARY_API_KEY", "GRAY_API_KEY", "LONG_API_KEY", "GRAYGATE_ADMIN_TOKEN", "GRAYGATE_CLIENT_TOKENS", "GRAYGATE_FORCE_TOKENS", "NATS_GATEWAY_PASSWORD", "NATS_ANALYZER_PASSWORD"},
	config.ForAnalyzer:  {"UPSTREAM_API_KEY", "PRIMARY_API_KEY", "GRAY_API_KEY", "LONG_API_KEY", "DATABASE_URL", "POSTGRES_PASSWORD", "GRAYGATE_ADMIN_TOKEN", "GRAYGATE_API_TOKEN", "GRAYGATE_CLIENT_TOKENS", "NATS_GATEWAY_PASSWORD", "NATS_COLLECTOR_PASSWORD"},
}

// loadFor loads a graygate config as svc with exactly env: it must load
// (the service starts with only its own variables).
func loadFor(t *testing.T, name string, data []byte, svc config.Service, env map[string]string) *config.Config {
	t.Helper()
	data = withSigningKeys(t, data, env)
	cfg, _, err := config.Parse(data, repoRoot(t), func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}, svc)
	if err != nil {
		t.Fatalf("%s as the %s with only its own variables %v:\n%v", name, svc, sortedKeys(env), err)
	}
	return cfg
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// withSigningKeys stands in for the rollout signing keys an operator makes
// (SPEC §7 rev. 4; never committed): seeds in a temporary directory in
// place of the mounted /etc/graygate-signing/, and their public keys for
// the GRAYGATE_*_NKEY variables env holds (a service without one is left
// without it, so a missing variable still fails).
func withSigningKeys(t *testing.T, data []byte, env map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"gateway", "analyzer"} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		if err := os.WriteFile(filepath.Join(dir, name+".nk"), seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if v := "GRAYGATE_" + strings.ToUpper(name) + "_NKEY"; env[v] != "" {
			env[v] = pub
		}
	}
	return bytes.ReplaceAll(data, []byte("/etc/graygate-signing/"), []byte(dir+"/"))
}

// placeholder is a stand-in value for a variable: URLs must be URLs,
// operators' tokens name=token, and a token is at least the 32 bytes
// `gateway validate` asks for (SPEC §3 rev. 4).
func placeholder(name string) string {
	switch {
	case strings.HasSuffix(name, "_URL"):
		return "http://upstream.test:8000/v1"
	case name == "GRAYGATE_ADMIN_TOKENS":
		return "operator=test-value-of-an-operator-token-0123456789"
	}
	return "test-value-" + strings.ToLower(name) + "-0123456789abcdef"
}

// natsConf is a parsed nats-server configuration: its users' permissions
// by name (variables resolved) and its top-level keys.
type natsConf struct {
	users map[string]any
	top   map[string]any
}

// natsUsers parses a nats-server configuration with throwaway values for
// its variables.
func natsUsers(t *testing.T, path string) (map[string]any, natsConf) {
	t.Helper()
	for _, v := range []string{"NATS_GATEWAY_PASSWORD", "NATS_ANALYZER_PASSWORD", "NATS_COLLECTOR_PASSWORD", "NATS_TLS_CERT", "NATS_TLS_KEY", "NATS_TLS_CA"} {
		t.Setenv(v, "value-of-"+v)
	}
	t.Setenv("POD_NAME", "nats-0")
	top, err := conf.ParseFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	users := map[string]any{}
	add := func(list any) {
		for _, u := range asList(list) {
			name, _ := dig(u, "user").(string)
			users[name] = dig(u, "permissions")
		}
	}
	add(dig(top, "authorization", "users"))
	if accounts, ok := top["accounts"].(map[string]any); ok {
		for _, a := range accounts {
			add(dig(a, "users"))
		}
	}
	return users, natsConf{users: users, top: top}
}

// allowList returns a user's publish (or subscribe) allow list.
func allowList(perms any, kind string) []string {
	var out []string
	for _, s := range asList(dig(perms, kind, "allow")) {
		out = append(out, fmt.Sprint(s))
	}
	return out
}

func monitors(top map[string]any) bool {
	for _, k := range []string{"http", "http_port", "https", "https_port", "monitor_port"} {
		if _, ok := top[k]; ok {
			return true
		}
	}
	return false
}

func TestShippedNATSConfiguration(t *testing.T) {
	shipped := filepath.Join(infraDir(t), "nats", "nats-server.conf")
	users, nc := natsUsers(t, shipped)
	if got := sortedKeys(users); !reflect.DeepEqual(got, []string{"analyzer", "collector", "gateway"}) {
		t.Fatalf("identities %v; want one per service", got)
	}
	if monitors(nc.top) {
		t.Error("the shipped NATS configuration opens the monitoring port")
	}
	if _, ok := nc.top["no_auth_user"]; ok {
		t.Error("no_auth_user lets clients in without an identity")
	}
	if dig(nc.top, "tls", "cert_file") == nil {
		t.Error("the shipped NATS configuration has no TLS")
	}
	for name, p := range users {
		pub := allowList(p, "publish")
		if len(pub) == 0 {
			t.Errorf("%s has no publish allow list (it may publish anything)", name)
			continue
		}
		// Its own inbox prefix only (SPEC §11 rev. 3), the rollout
		// subjects for the readers of the rollout log, and the analyzer's
		// heartbeat for the gateways (SPEC §11 rev. 4).
		wantSub := []string{"_INBOX_" + name + ".>"}
		if name != "collector" {
			wantSub = append(wantSub, "graygate.rollout.>")
		}
		if name == "gateway" {
			// and the prefix index the gateways share (prefix.share,
			// SPEC §6.7 rev. 4: core NATS, between gateways only)
			wantSub = append(wantSub, "graygate.heartbeat", "graygate.balance.>")
		}
		if sub := allowList(p, "subscribe"); !reflect.DeepEqual(sub, wantSub) {
			t.Errorf("%s subscribes to %v; want %v", name, sub, wantSub)
		}
		for _, s := range pub {
			for _, bad := range []string{"PURGE", "STREAM.DELETE", "STREAM.UPDATE", "MSG.DELETE", ">"} {
				if strings.Contains(s, bad) && !(bad == ">" && strings.HasSuffix(s, ".>")) {
					t.Errorf("%s may publish %s", name, s)
				}
			}
		}
	}
	allows := func(user, subj string) bool {
		for _, s := range allowList(users[user], "publish") {
			if s == subj {
				return true
			}
		}
		return false
	}
	// SPEC §7: who publishes which event subjects.
	for _, c := range []struct {
		user, subj string
		want       bool
	}{
		{"gateway", "graygate.request.>", true}, {"gateway", "graygate.rejection.>", true},
		{"gateway", "graygate.sample.>", true}, {"gateway", "graygate.stats.>", true},
		{"gateway", "graygate.rollout.>", true}, {"gateway", "graygate.analysis.>", false},
		{"analyzer", "graygate.rollout.>", true}, {"analyzer", "graygate.analysis.>", true},
		{"analyzer", "graygate.request.>", false}, {"analyzer", "graygate.stats.>", false},
		{"collector", "graygate.rollout.>", false}, {"collector", "graygate.request.>", false},
		{"collector", "graygate.stats.>", false}, {"collector", "graygate.analysis.>", false},
	} {
		if got := allows(c.user, c.subj); got != c.want {
			t.Errorf("%s may publish %s: %v; want %v", c.user, c.subj, got, c.want)
		}
	}
	for name := range users {
		for _, s := range allowList(users[name], "publish") {
			if strings.HasPrefix(s, "graygate.") && !allows("gateway", s) && !allows("analyzer", s) {
				t.Errorf("%s may publish %s, which no SPEC §7 role publishes", name, s)
			}
		}
	}

	// Kubernetes runs the same accounts, identities and permissions
	// (accounts.conf verbatim), clustered.
	k8sConf, _ := dig(k8sObjects(t)["ConfigMap/nats-config"], "data", "nats.conf").(string)
	k8sAccounts, _ := dig(k8sObjects(t)["ConfigMap/nats-config"], "data", "accounts.conf").(string)
	shippedAccounts, err := os.ReadFile(filepath.Join(infraDir(t), "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if k8sAccounts != string(shippedAccounts) {
		t.Error("the Kubernetes ConfigMap's accounts.conf differs from infra/nats/accounts.conf")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	writeFile(t, path, k8sConf)
	writeFile(t, filepath.Join(dir, "accounts.conf"), k8sAccounts)
	k8sUsers, k8sConf2 := natsUsers(t, path)
	if !reflect.DeepEqual(k8sUsers, users) {
		t.Errorf("the Kubernetes NATS identities differ from infra/nats/nats-server.conf")
	}
	if monitors(k8sConf2.top) {
		t.Error("the Kubernetes NATS configuration opens the monitoring port")
	}
	for _, want := range []string{"tls {", "verify: true", "$NATS_TLS_CERT", `include "accounts.conf"`} {
		if !strings.Contains(k8sConf, want) {
			t.Errorf("Kubernetes nats.conf lacks %q", want)
		}
	}
}

func TestComposeSecurity(t *testing.T) {
	dir := infraDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "compose", "graygate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(t, filepath.Join(dir, "docker-compose.yml"))
	services, _ := docs[0]["services"].(map[string]any)
	users, _ := natsUsers(t, filepath.Join(dir, "nats", "nats-server.conf"))

	for name, svc := range services {
		s, _ := svc.(map[string]any)
		img, _ := s["image"].(string)
		if s["build"] != nil {
			continue // built from infra/Dockerfile, whose base is pinned (below)
		}
		if !digestRef.MatchString(img) {
			t.Errorf("compose service %s: image %q is not pinned by digest", name, img)
		}
	}
	df, _ := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	for _, line := range strings.Split(string(df), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.EqualFold(f[0], "FROM") && f[1] != "scratch" && !strings.Contains(f[1], "@") {
			t.Errorf("Dockerfile: %q is not pinned by digest", line)
		}
	}
	if !strings.Contains(string(df), "ARG GO_DIGEST=sha256:") {
		t.Error("Dockerfile: the build image's digest is not set")
	}

	nats, _ := services["nats"].(map[string]any)
	if nats["ports"] != nil {
		t.Errorf("compose publishes NATS ports %v on the host", nats["ports"])
	}
	if cmd := fmt.Sprint(nats["command"]); !strings.Contains(cmd, "/etc/nats/nats-server.conf") || strings.Contains(cmd, "-m") {
		t.Errorf("compose nats runs %s; want the shipped configuration and no monitoring port", cmd)
	}
	mountsConf := false
	for _, v := range nats["volumes"].([]any) {
		if m, ok := v.(map[string]any); ok && m["target"] == "/etc/nats/nats-server.conf" {
			mountsConf = fileExists(filepath.Join(dir, fmt.Sprint(m["source"])))
		}
	}
	if !mountsConf {
		t.Error("compose nats does not mount infra/nats/nats-server.conf")
	}

	for name, svcKind := range serviceOf {
		s, _ := services[name].(map[string]any)
		if s == nil {
			t.Errorf("compose has no service %s", name)
			continue
		}
		envAny, _ := s["environment"].(map[string]any)
		env := map[string]string{}
		for k, v := range envAny {
			val := fmt.Sprint(v)
			if strings.HasPrefix(val, "${") {
				val = placeholder(k)
			}
			env[k] = val
		}
		cfg := loadFor(t, "compose/graygate.yaml", data, svcKind, env)
		if cfg.NATS.URL != "tls://nats:4222" || cfg.NATS.TLS.CAFile == "" {
			t.Errorf("compose %s: nats %q (CA %q); want TLS to the nats service", name, cfg.NATS.URL, cfg.NATS.TLS.CAFile)
		}
		if cfg.NATS.User != identityOf[name] || cfg.NATS.Password == "" || users[cfg.NATS.User] == nil {
			t.Errorf("compose %s connects as %q; want its own identity %q", name, cfg.NATS.User, identityOf[name])
		}
		for _, bad := range notFor[svcKind] {
			if _, ok := env[bad]; ok {
				t.Errorf("compose %s gets %s, another service's secret", name, bad)
			}
		}
		caMounted := false
		for _, v := range s["volumes"].([]any) {
			if m, ok := v.(map[string]any); ok && m["target"] == cfg.NATS.TLS.CAFile {
				caMounted = true
			}
		}
		if !caMounted {
			t.Errorf("compose %s does not mount the NATS CA at %s", name, cfg.NATS.TLS.CAFile)
		}
		if s["read_only"] != true || fmt.Sprint(s["cap_drop"]) != "[ALL]" {
			t.Errorf("compose %s: read_only %v cap_drop %v; want a read-only root and no capabilities", name, s["read_only"], s["cap_drop"])
		}
	}
}

func TestK8sSecurity(t *testing.T) {
	objs := k8sObjects(t)
	data, _ := dig(objs["ConfigMap/graygate-config"], "data", "graygate.yaml").(string)
	users, _ := natsUsers(t, filepath.Join(infraDir(t), "nats", "nats-server.conf"))

	var pods []string
	for key, obj := range objs {
		kind := strings.SplitN(key, "/", 2)[0]
		if kind != "Deployment" && kind != "StatefulSet" {
			continue
		}
		pods = append(pods, key)
		spec := dig(obj, "spec", "template", "spec")
		if dig(spec, "securityContext", "runAsNonRoot") != true || dig(spec, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: pod securityContext %v; want runAsNonRoot and RuntimeDefault seccomp", key, dig(spec, "securityContext"))
		}
		for _, list := range []string{"initContainers", "containers"} {
			cs, _ := dig(spec, list).([]any)
			for _, c := range cs {
				name := dig(c, "name")
				if img, _ := dig(c, "image").(string); !digestRef.MatchString(img) {
					t.Errorf("%s container %v: image %q is not pinned by digest", key, name, img)
				}
				if dig(c, "securityContext", "allowPrivilegeEscalation") != false || dig(c, "securityContext", "readOnlyRootFilesystem") != true ||
					fmt.Sprint(dig(c, "securityContext", "capabilities", "drop")) != "[ALL]" {
					t.Errorf("%s container %v: securityContext %v", key, name, dig(c, "securityContext"))
				}
				for _, p := range asList(dig(c, "ports")) {
					if asInt(dig(p, "containerPort")) == 8222 {
						t.Errorf("%s exposes the NATS monitoring port", key)
					}
				}
			}
		}
	}
	if len(pods) < 4 {
		t.Fatalf("found workloads %v", pods)
	}
	kdocs := yamlDocs(t, filepath.Join(infraDir(t), "k8s", "kustomization.yaml"))
	for _, img := range asList(kdocs[0]["images"]) {
		if d, _ := dig(img, "digest").(string); !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(d) {
			t.Errorf("kustomization image %v has no digest", img)
		}
	}
	for key, obj := range objs {
		if strings.HasPrefix(key, "Service/") {
			for _, p := range asList(dig(obj, "spec", "ports")) {
				if asInt(dig(p, "port")) == 8222 {
					t.Errorf("%s exposes the NATS monitoring port", key)
				}
			}
		}
	}

	// Each service: its own NATS identity over TLS, only its own secrets.
	for name, key := range map[string]string{"gateway": "Deployment/gateway", "collector": "Deployment/collector", "analyzer": "StatefulSet/analyzer"} {
		svcKind := serviceOf[name]
		spec := dig(objs[key], "spec", "template", "spec")
		for _, c := range append(asList(dig(spec, "initContainers")), asList(dig(spec, "containers"))...) {
			env := map[string]string{}
			var passwordKey string
			for _, e := range asList(dig(c, "env")) {
				n, _ := dig(e, "name").(string)
				if v, ok := dig(e, "value").(string); ok {
					env[n] = v
				} else {
					env[n] = placeholder(n)
				}
				if n == "NATS_PASSWORD" {
					passwordKey = fmt.Sprint(dig(e, "valueFrom", "secretKeyRef", "key"))
				}
			}
			cfg := loadFor(t, "ConfigMap graygate-config", []byte(data), svcKind, env)
			if !strings.HasPrefix(cfg.NATS.URL, "tls://") || cfg.NATS.TLS.CAFile == "" {
				t.Errorf("%s: nats %q (CA %q); want TLS", key, cfg.NATS.URL, cfg.NATS.TLS.CAFile)
			}
			if cfg.NATS.User != identityOf[name] || users[cfg.NATS.User] == nil {
				t.Errorf("%s connects as %q; want its own identity %q", key, cfg.NATS.User, identityOf[name])
			}
			if want := "NATS_" + strings.ToUpper(identityOf[name]) + "_PASSWORD"; passwordKey != want {
				t.Errorf("%s: NATS_PASSWORD from %q; want %s", key, passwordKey, want)
			}
			for _, bad := range notFor[svcKind] {
				if _, ok := env[bad]; ok {
					t.Errorf("%s gets %s, another service's secret", key, bad)
				}
			}
			mounted := false
			for _, m := range asList(dig(c, "volumeMounts")) {
				if dig(m, "name") == "nats-ca" && strings.HasPrefix(cfg.NATS.TLS.CAFile, fmt.Sprint(dig(m, "mountPath"))+"/") {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("%s container %v does not mount the NATS CA at %s", key, dig(c, "name"), cfg.NATS.TLS.CAFile)
			}
		}
	}

	// NetworkPolicies: deny by default; NATS only from the three services.
	deny := objs["NetworkPolicy/default-deny"]
	if deny == nil || fmt.Sprint(dig(deny, "spec", "podSelector")) != "map[]" || fmt.Sprint(dig(deny, "spec", "policyTypes")) != "[Ingress Egress]" {
		t.Errorf("no default-deny NetworkPolicy for every pod: %v", deny)
	}
	np := objs["NetworkPolicy/nats"]
	if np == nil {
		t.Fatal("no NetworkPolicy for NATS")
	}
	from := map[string]bool{}
	for _, rule := range asList(dig(np, "spec", "ingress")) {
		for _, peer := range asList(dig(rule, "from")) {
			app, _ := dig(peer, "podSelector", "matchLabels", "app.kubernetes.io/name").(string)
			if app == "" || dig(peer, "namespaceSelector") != nil {
				t.Errorf("NATS ingress from %v: only graygate pods may reach NATS", peer)
			}
			from[app] = true
		}
		if len(asList(dig(rule, "from"))) == 0 {
			t.Error("a NATS ingress rule has no from: anyone could connect")
		}
		for _, p := range asList(dig(rule, "ports")) {
			if asInt(dig(p, "port")) == 8222 {
				t.Error("NATS monitoring port allowed by NetworkPolicy")
			}
		}
	}
	if got := sortedKeys(from); !reflect.DeepEqual(got, []string{"analyzer", "collector", "gateway", "nats"}) {
		t.Errorf("NATS reachable from %v; want the three services and its peers", got)
	}
	for _, app := range []string{"gateway", "collector", "analyzer"} {
		if objs["NetworkPolicy/"+app] == nil {
			t.Errorf("no NetworkPolicy for %s", app)
		}
	}
	// The Secret templates carry no values, and name every identity.
	nk, _ := dig(objs["Secret/nats-auth"], "stringData").(map[string]any)
	for _, k := range []string{"NATS_GATEWAY_PASSWORD", "NATS_ANALYZER_PASSWORD", "NATS_COLLECTOR_PASSWORD"} {
		if v, ok := nk[k]; !ok || v != "" {
			t.Errorf("Secret nats-auth template: %s = %v", k, v)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestShippedSigningKeys: infra/ signs its rollout log (SPEC §7 rev. 4):
// compose and Kubernetes list signers for every actor, and mount the
// gateway's seed into the gateways and the analyzer's into the analyzer,
// where their configuration reads it; no seed is committed.
func TestShippedSigningKeys(t *testing.T) {
	dir := infraDir(t)
	data, err := os.ReadFile(filepath.Join(dir, "compose", "graygate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, "compose/graygate.yaml", data, neededVars(data))
	s := cfg.NATS.RolloutSigners
	if len(s.Analyzer) != 1 || len(s.Admin) != 1 || len(s.Config) != 1 {
		t.Errorf("compose rollout_signers = %+v; want a key per actor", s)
	}
	services, _ := yamlDocs(t, filepath.Join(dir, "docker-compose.yml"))[0]["services"].(map[string]any)
	for name, target := range map[string]string{"gateway": "/etc/graygate-signing/gateway.nk", "gateway-2": "/etc/graygate-signing/gateway.nk", "analyzer": "/etc/graygate-signing/analyzer.nk"} {
		found := false
		for _, v := range asList(dig(services[name], "volumes")) {
			if m, ok := v.(map[string]any); ok && m["target"] == target && strings.HasPrefix(fmt.Sprint(m["source"]), "./signing-keys/") {
				found = true
			}
		}
		if !found {
			t.Errorf("compose %s does not mount its signing key at %s", name, target)
		}
	}
	if !bytes.Contains(data, []byte("rollout_signing_key_file: /etc/graygate-signing/gateway.nk")) || !bytes.Contains(data, []byte("signing_key_file: /etc/graygate-signing/analyzer.nk")) {
		t.Error("compose/graygate.yaml does not read the mounted signing keys")
	}

	objs := k8sObjects(t)
	for key, item := range map[string]string{"Deployment/gateway": "gateway.nk", "StatefulSet/analyzer": "analyzer.nk"} {
		spec := dig(objs[key], "spec", "template", "spec")
		vol := ""
		for _, v := range asList(dig(spec, "volumes")) {
			if dig(v, "secret", "secretName") == "graygate-signing" && dig(v, "secret", "items", 0, "key") == item {
				vol, _ = dig(v, "name").(string)
			}
		}
		mounted := false
		for _, m := range asList(dig(spec, "containers", 0, "volumeMounts")) {
			if vol != "" && dig(m, "name") == vol && dig(m, "mountPath") == "/etc/graygate-signing" {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s does not mount %s of Secret graygate-signing at /etc/graygate-signing", key, item)
		}
	}
	if _, ok := dig(objs["Secret/graygate-signing"], "stringData", "gateway.nk").(string); !ok {
		t.Error("no Secret template graygate-signing")
	}
	if seeds, _ := filepath.Glob(filepath.Join(dir, "*", "*.nk")); len(seeds) > 0 {
		t.Logf("seed files under infra/ (never committed: .gitignore lists infra/signing-keys/): %v", seeds)
	}
}
