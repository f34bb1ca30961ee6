package config

import (
	"bytes"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/graygate/graygate/schemas/events"
)

// MinTokenBytes is the shortest admin or API token `gateway validate`
// accepts without a warning (SPEC §3 rev. 4; a later revision refuses
// shorter ones).
const MinTokenBytes = 32

// adminTokens reads gateway.admin_tokens_env: `name=token,…`, one per
// operator (SPEC §3 rev. 4). Names are [a-z0-9_.-]{1,32} and distinct; an
// unset or empty variable means none. Messages name the variable and the
// operator, never a token.
func (d *decoder) adminTokens(p, name string) []OperatorToken {
	var out []OperatorToken
	seen := map[string]bool{}
	owner := map[string]string{} // token → the operator it names
	for i, entry := range d.envList(p, name) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		op, tok, ok := strings.Cut(entry, "=")
		op, tok = strings.TrimSpace(op), strings.TrimSpace(tok)
		switch {
		case !ok || tok == "":
			d.errorf(p, nil, "variable %s: entry %d is not name=token", name, i)
			continue
		case !events.ValidOperator(op):
			d.errorf(p, nil, "variable %s: entry %d: operator name %q is not [a-z0-9_.-]{1,32}", name, i, clipName(op))
			continue
		case seen[op]:
			d.errorf(p, nil, "variable %s: operator %s is listed twice", name, op)
			continue
		case owner[tok] != "":
			// A token names one operator, or the record names the wrong one.
			d.errorf(p, nil, "variable %s: operators %s and %s have the same token; each operator needs a token of their own", name, owner[tok], op)
			continue
		}
		seen[op], owner[tok] = true, op
		out = append(out, OperatorToken{Name: op, Token: Secret(tok)})
	}
	return out
}

func clipName(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// warnShortTokens warns about every admin and API token shorter than
// MinTokenBytes (SPEC §3 rev. 4), naming its key and operator, never the
// token.
func (d *decoder) warnShortTokens(c *Config) {
	if d.svc.gateway() {
		g := &c.Gateway
		if g.AdminToken != "" && len(g.AdminToken) < MinTokenBytes {
			d.warnf("gateway.admin_token", nil, "the admin token (or %s) is shorter than %d bytes; a later revision refuses it", EnvAdminToken, MinTokenBytes)
		}
		for _, t := range g.AdminTokens {
			if len(t.Token) < MinTokenBytes {
				d.warnf("gateway.admin_tokens_env", nil, "the token of operator %s (%s) is shorter than %d bytes; a later revision refuses it", t.Name, g.AdminTokensEnv, MinTokenBytes)
			}
		}
	}
	// The collector's token, also from `gateway validate` when the file
	// holds it literally (the gateway leaves ${VAR} in collector keys
	// unexpanded, and GRAYGATE_API_TOKEN is the collector's to read).
	t := c.Collector.APIToken
	if !d.svc.collector() {
		if strings.Contains(string(t), "${") {
			t = ""
		}
		// For gateway validate (SPEC §3 rev. 4: any admin or API token)
		// the variable, when set, is what the collector will use: its
		// length alone is looked at, the token kept nowhere.
		if v, _ := d.lookupEnv(EnvAPIToken); v != "" && d.svc == ForGateway {
			t = Secret(v)
		}
	}
	if t != "" && len(t) < MinTokenBytes {
		d.warnf("collector.api_token", nil, "the API token (or %s) is shorter than %d bytes; a later revision refuses it", EnvAPIToken, MinTokenBytes)
	}
}

// validateSigning checks nats.rollout_signers (every key a public user
// nkey; each service warns at start when it is empty, UnsignedWarning),
// and reads the signing key each service
// uses (SPEC §7 rev. 4): the gateway's gateway.rollout_signing_key_file,
// listed under admin and config; the analyzer's
// analyzer.signing_key_file, listed under analyzer. With signers, a
// service that appends rollout events needs its key: readers would
// refuse everything it wrote.
func (d *decoder) validateSigning(c *Config) {
	s := c.NATS.RolloutSigners
	for _, kind := range []struct {
		name string
		keys []string
	}{{"analyzer", s.Analyzer}, {"admin", s.Admin}, {"config", s.Config}} {
		for i, k := range kind.keys {
			if !nkeys.IsValidPublicUserKey(k) {
				d.errorf(indexPath("nats.rollout_signers."+kind.name, i), nil, "%q is not a public user nkey (U…)", clipName(k))
			}
		}
	}
	if d.svc.gateway() {
		g := &c.Gateway
		if seed, pub, ok := d.signingKey("gateway.rollout_signing_key_file", g.RolloutSigningKeyFile, !s.Empty()); ok {
			g.RolloutSigningSeed = seed
			for kind, keys := range map[string][]string{"admin": s.Admin, "config": s.Config} {
				if !s.Empty() && !slices.Contains(keys, pub) {
					d.errorf("gateway.rollout_signing_key_file", nil, "its public key %s is not listed in nats.rollout_signers.%s: every reader would refuse this gateway's %s events", pub, kind, kind)
				}
			}
		}
	}
	if d.svc == ForAll || d.svc == ForAnalyzer {
		a := &c.Analyzer
		if seed, pub, ok := d.signingKey("analyzer.signing_key_file", a.SigningKeyFile, !s.Empty()); ok {
			a.SigningSeed = seed
			if !s.Empty() && !slices.Contains(s.Analyzer, pub) {
				d.errorf("analyzer.signing_key_file", nil, "its public key %s is not listed in nats.rollout_signers.analyzer: every reader would refuse the analyzer's events and heartbeats", pub)
			}
		}
	}
}

// signingKey reads the nkey seed in file (key p): its seed and public key.
// An empty file is an error when required.
func (d *decoder) signingKey(p, file string, required bool) (Secret, string, bool) {
	if d.failed[p] {
		return "", "", false
	}
	if file == "" {
		if required {
			d.errorf(p, nil, "must name an nkey seed file when nats.rollout_signers is set (its events would be refused unsigned)")
		}
		return "", "", false
	}
	data, err := os.ReadFile(file)
	if err != nil {
		d.errorf(p, nil, "read the nkey seed: %v", err)
		return "", "", false
	}
	seed := bytes.TrimSpace(data)
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		d.errorf(p, nil, "file %s does not hold an nkey seed", file)
		return "", "", false
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		d.errorf(p, nil, "file %s does not hold a user nkey seed (SU…)", file)
		return "", "", false
	}
	return Secret(seed), pub, true
}

// UnsignedWarning is what every service logs at start when
// nats.rollout_signers is empty (SPEC §7 rev. 4).
const UnsignedWarning = "nats.rollout_signers is empty: rollout events are unsigned and accepted from any identity that may publish them; list the analyzer's and the gateways' public nkeys (SPEC §7)"
