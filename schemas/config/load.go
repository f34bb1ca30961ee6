package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Environment variables that override the file when set and non-empty.
const (
	EnvNATSURL     = "NATS_URL"             // nats.url
	EnvDatabaseURL = "DATABASE_URL"         // postgres.url
	EnvAdminToken  = "GRAYGATE_ADMIN_TOKEN" // gateway.admin_token
	EnvAPIToken    = "GRAYGATE_API_TOKEN"   // collector.api_token
	EnvNATSCreds   = "NATS_CREDS"           // nats.creds_file (rev. 2)
)

// Load reads the configuration file at path with the process environment,
// for the service named (ForAll when none: every secret and file).
// Relative files it names (response schemas) are looked up next to it first.
// See Parse for the results.
func Load(path string, svc ...Service) (*Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, filepath.Dir(path), os.LookupEnv, svc...)
}

// Parse reads a configuration document: YAML decoding with every key checked,
// `${VAR}` expansion through lookupEnv (nil: no variables), defaults, the
// environment overrides (NATS_URL, DATABASE_URL, GRAYGATE_ADMIN_TOKEN,
// GRAYGATE_API_TOKEN, client tokens, upstream API keys), validation, and the
// response schema files, resolved against dir and then the working directory.
//
// With a Service (at most one), only that service's secrets and files are
// resolved, and `${VAR}` is expanded only in the keys it reads: a
// reference to an unset variable elsewhere is left unexpanded and the key
// is not checked (SPEC §2). Without one, everything is (ForAll).
//
// When the document has problems, Parse returns a nil *Config and an Errors
// listing all of them in file order. Warnings are returned either way; they
// never make a document unusable.
func Parse(data []byte, dir string, lookupEnv func(string) (string, bool), svc ...Service) (*Config, []Warning, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	d := newDecoder(lookupEnv)
	if len(svc) > 0 {
		d.svc = svc[0]
	}
	cfg := &Config{}
	cfg.setDefaults()

	root, err := parseYAML(data)
	if err != nil {
		return nil, nil, Errors{{Message: err.Error()}}
	}
	switch {
	case root == nil || isNull(root):
	case root.Kind != yaml.MappingNode:
		d.errorf("", root, "a configuration file is a mapping of sections (nats, gateway, routing, ...), got %s", describe(root))
	default:
		d.decode("", root, reflect.ValueOf(cfg).Elem())
	}
	cfg.DeploymentOrder = d.order["deployments"]
	for name, dep := range cfg.Deployments {
		dep.Name = name
	}
	if !d.aborted { // a cut-off document would only add misleading errors
		d.applyEnv(cfg)
		d.validate(cfg, dir)
	}

	d.locate(d.errs)
	d.locate(d.warns)
	sortIssues(d.errs)
	sortIssues(d.warns)
	var warnings []Warning
	for _, w := range d.warns {
		warnings = append(warnings, Warning{Path: w.path, Message: w.msg})
	}
	if len(d.errs) > 0 {
		errs := make(Errors, len(d.errs))
		for i, e := range d.errs {
			errs[i] = &FieldError{Path: e.path, Line: e.line, Message: e.msg}
		}
		return nil, warnings, errs
	}
	setFingerprints(cfg)
	return cfg, warnings, nil
}

// parseYAML returns the root node of the only document in data, or nil for
// an empty file.
func parseYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, err
	default:
		return nil, fmt.Errorf("yaml: line %d: a configuration file holds one YAML document, found another", next.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// applyEnv applies the environment overrides and reads the secrets whose
// variables the file names. Messages name variables, never their values.
func (d *decoder) applyEnv(c *Config) {
	env := func(name string) string {
		v, _ := d.lookupEnv(name)
		return v
	}
	if v := env(EnvNATSURL); v != "" {
		c.NATS.URL = v
	}
	if v := env(EnvNATSCreds); v != "" {
		// It overrides the file's identity, whichever kind that is (SPEC
		// §2: NATS_CREDS overrides), rather than adding a second one.
		c.NATS.CredsFile = v
		c.NATS.User, c.NATS.PasswordEnv, c.NATS.NKeySeedFile = "", "", ""
	}
	if d.svc.connects() {
		d.natsPassword(&c.NATS)
	}
	if d.svc.postgres() {
		if v := env(EnvDatabaseURL); v != "" {
			c.Postgres.URL = Secret(v)
		}
	}
	if d.svc.collector() {
		if v := env(EnvAPIToken); v != "" {
			c.Collector.APIToken = Secret(v)
		}
	}
	if !d.svc.gateway() {
		return
	}
	if v := env(EnvAdminToken); v != "" {
		c.Gateway.AdminToken = Secret(v)
	}
	c.Gateway.ClientTokens = d.bearerTokens("gateway.client_tokens_env", c.Gateway.ClientTokensEnv)
	c.Gateway.ForceTokens = d.bearerTokens("gateway.force_tokens_env", c.Gateway.ForceTokensEnv)
	c.Gateway.AdminTokens = d.adminTokens("gateway.admin_tokens_env", c.Gateway.AdminTokensEnv)
	for _, t := range c.Gateway.AdminTokens {
		if c.Gateway.AdminToken != "" && t.Token == c.Gateway.AdminToken {
			d.errorf("gateway.admin_tokens_env", nil, "variable %s: operator %s's token is the shared admin token (gateway.admin_token, %s), which is the operator \"\"; give the operator a token of their own",
				c.Gateway.AdminTokensEnv, t.Name, EnvAdminToken)
		}
	}
	for _, name := range c.DeploymentOrder {
		dep := c.Deployments[name]
		d.apiKey("deployments."+name+".primary.api_key_env", &dep.Primary)
		if dep.Gray != nil {
			d.apiKey("deployments."+name+".gray.api_key_env", dep.Gray)
		}
	}
}

// bearerTokens reads the comma-separated bearer tokens of the variable name
// (p is its key). An unset or empty variable means no tokens (SPEC §11).
func (d *decoder) bearerTokens(p, name string) []Secret {
	var out []Secret
	for _, t := range d.envList(p, name) {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, Secret(t))
		}
	}
	return out
}

// envList reads the comma-separated list in the variable name (p is its
// key), entries untrimmed and empty ones kept, so that a message can count
// them. An unset or empty variable means none (SPEC §11).
func (d *decoder) envList(p, name string) []string {
	if name == "" {
		return nil
	}
	if !envName.MatchString(name) {
		d.errorf(p, nil, "%q is not a variable name", name)
		return nil
	}
	v, _ := d.lookupEnv(name)
	return strings.Split(v, ",")
}

// natsPassword reads nats.password_env, which every service that connects
// needs (each has its own identity).
func (d *decoder) natsPassword(n *NATS) {
	if v, ok := d.secretEnv("nats.password_env", n.PasswordEnv, ""); ok {
		n.Password = v
	}
}

func (d *decoder) apiKey(p string, u *Upstream) {
	if v, ok := d.secretEnv(p, u.APIKeyEnv, " (export it, or drop api_key_env for an upstream that takes no key)"); ok {
		u.APIKey = v
	}
}

// secretEnv reads the secret in the variable name, which the key p names
// (none when name is empty or p already failed). An unset or empty variable
// is an error; hint ends its message.
func (d *decoder) secretEnv(p, name, hint string) (Secret, bool) {
	if name == "" || d.failed[p] {
		return "", false
	}
	if !envName.MatchString(name) {
		d.errorf(p, nil, "%q is not a variable name", name)
		return "", false
	}
	v, _ := d.lookupEnv(name)
	if v == "" {
		d.errorf(p, nil, "variable %s is unset or empty%s", name, hint)
		return "", false
	}
	return Secret(v), true
}
