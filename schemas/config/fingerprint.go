package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"strconv"
)

// Fingerprint returns an arm's fingerprint (SPEC §7 rev. 3 "Arm
// fingerprint"): the first 16 hex digits of the SHA-256 of its upstream
// identity written as canonical JSON, an object with exactly the keys
// "model", "params", "prompt_hash" and "url", in that (sorted) order and
// without white space:
//
//	{"model":"qwen-32b","params":{"temperature":0.2,"top_k":40},"prompt_hash":"","url":"https://llm.internal/v1"}
//
// url is the upstream URL with its userinfo removed (credentials never
// enter it; the rest is as configured); prompt_hash is the prompt file's
// hex SHA-256, "" without a prompt; params holds the arm's sampling
// values by name, sorted, as JSON numbers (whole numbers for top_k and n),
// {} without any. JSON quoting makes the encoding unambiguous: no choice
// of values spells another's. Two gateways with the same arm configuration
// compute the same fingerprint; a change of model, URL, prompt or any
// parameter gives another.
//
// (rev. 4) A pool's identity is its discovery name, not its endpoints
// (they change as the pool scales): url is "dns://NAME:PORT" for
// discovery and "endpoints" for a static list; and revision, the
// operator's name for what the pool runs, is a fifth key "revision"
// when it is set (so a single url without one keeps its rev. 3
// fingerprint).
func Fingerprint(model, rawURL, promptHash string, params ArmParams) string {
	return fingerprint(model, rawURL, promptHash, "", params)
}

// PoolIdentity is the url an upstream's fingerprint covers: its url, or
// its pool's identity (see Fingerprint).
func (u *Upstream) PoolIdentity() string {
	switch {
	case u.Discovery != nil:
		return "dns://" + net.JoinHostPort(u.Discovery.DNS, strconv.Itoa(u.Discovery.Port))
	case len(u.Endpoints) > 0:
		return "endpoints"
	}
	return u.URL
}

func fingerprint(model, rawURL, promptHash, revision string, params ArmParams) string {
	values := make(map[string]any, len(params))
	for name, p := range params {
		if dom, _ := domainOf(name); dom.whole {
			values[name] = p.Int
		} else {
			values[name] = p.Value
		}
	}
	identity := struct {
		Model      string         `json:"model"`
		Params     map[string]any `json:"params"`
		PromptHash string         `json:"prompt_hash"`
		Revision   string         `json:"revision,omitempty"`
		URL        string         `json:"url"`
	}{model, values, promptHash, revision, withoutUserinfo(rawURL)}
	b, err := json.Marshal(identity)
	if err != nil { // strings, and numbers the decoder made finite
		panic("config: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// withoutUserinfo returns raw without the user and password of its
// authority; raw as it is when it does not parse (validation refuses it).
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// setFingerprints computes each arm's Fingerprint once, at load: a gray
// without url is primary's upstream, with primary's model unless it names
// one (SPEC §6.6), so that is the identity it fingerprints.
func setFingerprints(c *Config) {
	for _, dep := range c.Deployments {
		p := &dep.Primary
		p.Fingerprint = fingerprint(p.Model, p.PoolIdentity(), p.Prompt.hash(), p.Revision, p.Params)
		if g := dep.Gray; g != nil {
			model, u, rev := g.Model, g.PoolIdentity(), g.Revision
			if !g.HasUpstream() {
				u, rev = p.PoolIdentity(), p.Revision
				if model == "" {
					model = p.Model
				}
			}
			g.Fingerprint = fingerprint(model, u, g.Prompt.hash(), rev, g.Params)
		}
	}
}

// hash is the prompt's Hash, "" without a prompt.
func (p *Prompt) hash() string {
	if p == nil {
		return ""
	}
	return p.Hash
}
