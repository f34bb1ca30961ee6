package events

import (
	"encoding/base64"
	"fmt"
	"slices"
	"unicode/utf8"
)

// SampleMalformed is the data of a graygate.sample.malformed event: one per
// failed gray payload (a canary attempt or a shadow copy), published on
// SampleSubject(Deployment).
//
// The raw payload travels as Payload when it is valid UTF-8, else as
// PayloadBase64; at most one of them is set, and neither for an empty
// payload. SetPayload applies that rule and the size cap.
type SampleMalformed struct {
	// RequestID is the x-request-id of the client request.
	RequestID string `json:"request_id"`
	// Deployment whose gray arm failed.
	Deployment string `json:"deployment"`
	// Arm is ArmGray for a canary attempt, ArmShadow for a shadow copy.
	Arm Arm `json:"arm"`
	// UpstreamModel is the gray upstream's model name.
	UpstreamModel string `json:"upstream_model"`
	// Reason says how the payload failed.
	Reason SampleReason `json:"reason"`
	// Status is gray's HTTP status; 0 when no response arrived.
	Status int `json:"status"`
	// ValidationErrors lists the schema violations (ReasonSchemaViolation)
	// or the one parse, timeout or transport error; empty, never null, when
	// there is nothing to say.
	ValidationErrors []ValidationError `json:"validation_errors"`
	// Payload is the raw gray payload when it is valid UTF-8.
	Payload string `json:"payload,omitempty"`
	// PayloadBase64 is the raw gray payload, standard base64 with padding,
	// when it is not valid UTF-8.
	PayloadBase64 string `json:"payload_base64,omitempty"`
	// PayloadTruncated is true when the payload was cut at the size cap.
	PayloadTruncated bool `json:"payload_truncated"`
	// PayloadBytes is the size of the original payload, before any cut.
	PayloadBytes int64 `json:"payload_bytes"`
	// PromptHash is the lowercase hex SHA-256 of the bytes of the request's
	// `messages` value as received, so failures of one prompt group together.
	PromptHash string `json:"prompt_hash"`
	// ArmPromptVersion and ArmPromptHash name the failing arm's prompt
	// (SPEC §6.6), "" without one; distinct from PromptHash. (rev. 2)
	ArmPromptVersion string `json:"arm_prompt_version"`
	ArmPromptHash    string `json:"arm_prompt_hash"`
	// LatencyMillis is the gray attempt's duration.
	LatencyMillis float64 `json:"latency_ms"`
	// Replica is the replica of the failing attempt's pool, `host:port`
	// (SPEC §6.7); "" for a single url and from gateways before rev. 4.
	Replica string `json:"replica" schema:"optional"`

	// Outcome (rev. 3) is how the failed attempt counts in the per-arm
	// statistics: a contract failure is OutcomeSchemaViolation or
	// OutcomeInvalidJSON when primary's answer to the same request passed
	// (or failed some other way), OutcomeSchemaViolationBoth when
	// primary's answer broke the contract too or was cut by the client's
	// token limit (SPEC §6.2). "" from gateways before rev. 3.
	Outcome Outcome `json:"outcome,omitempty"`
	// PrimaryValidationErrors, PrimaryPayload or PrimaryPayloadBase64,
	// PrimaryPayloadTruncated and PrimaryPayloadBytes (rev. 3) are, for
	// OutcomeSchemaViolationBoth only, primary's answer to the same
	// request and why it broke the contract (or was cut), with the
	// payload's rules (SetPrimaryPayload).
	PrimaryValidationErrors []ValidationError `json:"primary_validation_errors,omitempty"`
	PrimaryPayload          string            `json:"primary_payload,omitempty"`
	PrimaryPayloadBase64    string            `json:"primary_payload_base64,omitempty"`
	PrimaryPayloadTruncated bool              `json:"primary_payload_truncated,omitempty"`
	PrimaryPayloadBytes     int64             `json:"primary_payload_bytes,omitempty"`
}

// ValidationError is one reason a payload failed: the JSON path of the field
// (gojsonschema's notation, "(root)" for the whole document) and what is wrong.
type ValidationError struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// EventType returns TypeSampleMalformed.
func (*SampleMalformed) EventType() string { return TypeSampleMalformed }

// Subject returns SampleSubject(s.Deployment).
func (s *SampleMalformed) Subject() string { return SampleSubject(s.Deployment) }

// SetPayload stores raw as the sample's payload: PayloadBytes is len(raw);
// when max > 0 and raw is longer, it is cut at max bytes and PayloadTruncated
// is set. The kept bytes go to Payload when they are valid UTF-8 (a cut that
// splits a character backs off to the character's start, so a text payload
// stays text), else to PayloadBase64.
//
// A cut text payload of max bytes can grow when JSON-escaped (control
// characters take six bytes each), so a publisher keeps max well under the
// NATS max payload (1 MiB by default); base64 grows by a third.
func (s *SampleMalformed) SetPayload(raw []byte, max int) {
	s.Payload, s.PayloadBase64, s.PayloadTruncated = fitPayload(raw, max)
	s.PayloadBytes = int64(len(raw))
}

// SetPrimaryPayload stores raw as primary's answer of a
// schema_violation_both sample, by SetPayload's rules.
func (s *SampleMalformed) SetPrimaryPayload(raw []byte, max int) {
	s.PrimaryPayload, s.PrimaryPayloadBase64, s.PrimaryPayloadTruncated = fitPayload(raw, max)
	s.PrimaryPayloadBytes = int64(len(raw))
}

// fitPayload cuts raw at max bytes (when max > 0) and returns it as text
// when valid UTF-8, else as base64 (see SetPayload).
func fitPayload(raw []byte, max int) (text, b64 string, truncated bool) {
	kept := raw
	if max > 0 && len(raw) > max {
		kept, truncated = TrimCutRune(raw[:max]), true
	}
	switch {
	case len(kept) == 0:
	case utf8.Valid(kept):
		text = string(kept)
	default:
		b64 = base64.StdEncoding.EncodeToString(kept)
	}
	return text, b64, truncated
}

// TrimCutRune returns b, a prefix of some text, without the bytes of a
// character its cut went through: a cut inside a character leaves up to
// three bytes of it, dropped when that makes b valid UTF-8 (text stays
// text; bytes that were not text are left as they are).
func TrimCutRune(b []byte) []byte {
	for j := 1; j < utf8.UTFMax && j < len(b) && !utf8.Valid(b); j++ {
		if utf8.Valid(b[:len(b)-j]) {
			return b[:len(b)-j]
		}
	}
	return b
}

// RawPayload returns the payload bytes as they were kept: Payload's bytes,
// or PayloadBase64 decoded.
func (s *SampleMalformed) RawPayload() ([]byte, error) {
	return rawPayload("payload", s.Payload, s.PayloadBase64)
}

// RawPrimaryPayload returns primary's payload bytes as they were kept
// (schema_violation_both): PrimaryPayload's bytes, or
// PrimaryPayloadBase64 decoded.
func (s *SampleMalformed) RawPrimaryPayload() ([]byte, error) {
	return rawPayload("primary_payload", s.PrimaryPayload, s.PrimaryPayloadBase64)
}

// rawPayload is fitPayload undone: the bytes of a payload kept as text,
// or as b64 (the field name's _base64).
func rawPayload(name, text, b64 string) ([]byte, error) {
	if b64 == "" {
		return []byte(text), nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: %s_base64: %v", ErrInvalidData, name, err)
	}
	return b, nil
}

// Check reports every rule s breaks: empty request id or upstream model, a
// deployment that is not a subject token, an arm other than gray or shadow,
// an unknown reason, both payload fields set, bad base64, more payload than
// PayloadBytes, a truncation flag that disagrees with the sizes, a prompt
// hash that is not 64 lowercase hex digits, negative sizes or times, an
// unknown outcome, schema_violation_both with a reason other than a
// contract failure, and primary_* fields on any other outcome (the
// primary payload follows the payload's rules), and a replica name longer
// than MaxReplicaLen or holding a control character.
func (s *SampleMalformed) Check() error {
	var p problems
	p.nonEmpty("request_id", s.RequestID)
	p.token("deployment", s.Deployment)
	if !slices.Contains(SampleArms, s.Arm) {
		p.add("arm %q is not gray or shadow", s.Arm)
	}
	p.nonEmpty("upstream_model", s.UpstreamModel)
	if !s.Reason.Valid() {
		p.add("reason %q is not a sample reason", s.Reason)
	}
	p.status("status", s.Status)
	if s.ValidationErrors == nil {
		p.add("validation_errors is null (use an empty list)")
	}
	checkPayload(&p, "payload", s.Payload, s.PayloadBase64, s.PayloadTruncated, s.PayloadBytes)
	switch {
	case s.Outcome != "" && !s.Outcome.Valid():
		p.add("outcome %q is not an attempt outcome", s.Outcome)
	case s.Outcome == OutcomeSchemaViolationBoth:
		if !slices.Contains(BothReasons, s.Reason) {
			p.add("outcome schema_violation_both with reason %q (want schema_violation or invalid_json)", s.Reason)
		}
		checkPayload(&p, "primary_payload", s.PrimaryPayload, s.PrimaryPayloadBase64, s.PrimaryPayloadTruncated, s.PrimaryPayloadBytes)
	case s.PrimaryValidationErrors != nil || s.PrimaryPayload != "" || s.PrimaryPayloadBase64 != "" ||
		s.PrimaryPayloadTruncated || s.PrimaryPayloadBytes != 0:
		p.add("primary_* fields are set but outcome is %q, not schema_violation_both", s.Outcome)
	}
	if !isHexSHA256(s.PromptHash) {
		p.add("prompt_hash %q is not 64 lowercase hex digits", s.PromptHash)
	}
	p.armPrompt("", s.ArmPromptVersion, s.ArmPromptHash)
	p.millis("latency_ms", s.LatencyMillis)
	p.replica("replica", s.Replica)
	return p.err(TypeSampleMalformed)
}

// checkPayload applies the payload rules to one payload's fields named
// name, name_base64, name_truncated and name_bytes.
func checkPayload(p *problems, name, text, b64 string, truncated bool, size int64) {
	p.count(name+"_bytes", size)
	kept := int64(len(text))
	if text != "" && b64 != "" {
		p.add("%s and %s_base64 are both set", name, name)
	}
	if b64 != "" {
		n, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			p.add("%s_base64 is not standard base64: %v", name, err)
		}
		kept = int64(len(n))
	}
	switch {
	case kept > size:
		p.add("%s holds %d bytes, more than %s_bytes %d", name, kept, name, size)
	case kept < size && !truncated:
		p.add("%s holds %d of %s_bytes %d but %s_truncated is false", name, kept, name, size, name)
	case kept == size && truncated:
		p.add("%s_truncated is true but the %s holds all %d bytes", name, name, size)
	}
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
