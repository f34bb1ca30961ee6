package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
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
func Fingerprint(model, rawURL, promptHash string, params ArmParams) string {
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
		URL        string         `json:"url"`
	}{model, values, promptHash, withoutUserinfo(rawURL)}
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
		p.Fingerprint = Fingerprint(p.Model, p.URL, p.Prompt.hash(), p.Params)
		if g := dep.Gray; g != nil {
			model, u := g.Model, g.URL
			if u == "" {
				u = p.URL
				if model == "" {
					model = p.Model
				}
			}
			g.Fingerprint = Fingerprint(model, u, g.Prompt.hash(), g.Params)
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
