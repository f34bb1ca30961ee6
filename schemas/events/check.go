package events

import (
	"errors"
	"fmt"
	"math"
)

// Data is implemented by the pointer to every event data type of this
// package. NewEnvelope checks values that implement it, and Unmarshal
// decodes into one.
type Data interface {
	// EventType is the envelope type of this data.
	EventType() string
	// Subject is the NATS subject the event is published on.
	Subject() string
	// Check reports every rule the value breaks, joined, or nil.
	Check() error
}

// problems collects rule violations; err joins them under ErrInvalidData.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err(typ string) error {
	if len(p) == 0 {
		return nil
	}
	errs := make([]error, len(p))
	for i, s := range p {
		errs[i] = errors.New(s)
	}
	return fmt.Errorf("%w: %s: %w", ErrInvalidData, typ, errors.Join(errs...))
}

// token checks a deployment or band name: [A-Za-z0-9_-]+, the config rule
// that makes it one NATS subject token and a safe metric label.
func (p *problems) token(field, v string) {
	if v == "" {
		p.add("%s is empty", field)
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			p.add("%s %q is not [A-Za-z0-9_-]+", field, v)
			return
		}
	}
}

// source checks what names a gateway's report: the deployment, a subject
// token, and the gateway, present and at most MaxGatewayLen bytes.
func (p *problems) source(deployment, gateway string) {
	p.token("deployment", deployment)
	switch {
	case gateway == "":
		p.add("gateway is empty")
	case len(gateway) > MaxGatewayLen:
		p.add("gateway is longer than %d bytes", MaxGatewayLen)
	}
}

// band checks a context band's name (ValidBand), naming the rule broken.
func (p *problems) band(field, v string) {
	switch {
	case ValidBand(v):
	case len(v) > MaxBandLen:
		p.add("%s is longer than %d bytes", field, MaxBandLen)
	default:
		p.token(field, v)
	}
}

func (p *problems) nonEmpty(field, v string) {
	if v == "" {
		p.add("%s is empty", field)
	}
}

func (p *problems) count(field string, v int64) {
	if v < 0 {
		p.add("%s is negative (%d)", field, v)
	}
}

// countAt is count of the field named prefix+name+member, a name only
// built for a problem: a statistic's checks name a hundred fields that
// pass.
func (p *problems) countAt(prefix, name, member string, v int64) {
	if v < 0 {
		p.add("%s%s%s is negative (%d)", prefix, name, member, v)
	}
}

// millisAt is millis of the field named prefix+name+member (countAt).
func (p *problems) millisAt(prefix, name, member string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		p.add("%s%s%s must be a finite non-negative number, got %v", prefix, name, member, v)
	}
}

// millis checks a duration in milliseconds (or any non-negative measure).
func (p *problems) millis(field string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		p.add("%s must be a finite non-negative number, got %v", field, v)
	}
}

func (p *problems) finite(field string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		p.add("%s must be finite, got %v", field, v)
	}
}

// status checks an HTTP status: 0 when no response arrived, else 100–599.
func (p *problems) status(field string, v int) {
	if v != 0 && (v < 100 || v > 599) {
		p.add("%s %d is not 0 or an HTTP status 100-599", field, v)
	}
}

// armPrompt checks an arm's prompt fields (SPEC §6.6): a version of at
// most 128 bytes, and a hash that is "" or 64 lowercase hex digits.
func (p *problems) armPrompt(prefix, version, hash string) {
	if len(version) > 128 {
		p.add("%sarm_prompt_version is longer than 128 bytes", prefix)
	}
	if hash != "" && !isHexSHA256(hash) {
		p.add("%sarm_prompt_hash %q is not 64 lowercase hex digits", prefix, hash)
	}
}

// replica checks a replica's name (SPEC §6.7, rev. 4): "" (a single url)
// or at most MaxReplicaLen bytes without control characters, so it is a
// safe metric label and table cell.
func (p *problems) replica(field, v string) {
	if len(v) > MaxReplicaLen {
		p.add("%s is longer than %d bytes", field, MaxReplicaLen)
		return
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			p.add("%s %q holds a control character", field, v)
			return
		}
	}
}
