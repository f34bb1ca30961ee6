// Package events is the contract between graygate's services on the event
// log (SPEC §7): the CloudEvents 1.0 envelope, a Go type for the data of every
// event type with the rules a valid value obeys, the closed sets those types
// use, the subjects and streams events travel on, and a JSON Schema per data
// type (the *.schema.json files next to this package, embedded).
//
// A producer builds an Envelope with NewEnvelope and publishes its JSON on
// the data's Subject with the envelope id as the Nats-Msg-Id. A consumer
// calls Decode on the message body, then Envelope.Unmarshal into the Go type
// of the envelope's Type (or DecodeData for any type). Every service calls
// EnsureStreams at start.
//
// Unknown fields are ignored when decoding, so that a newer producer that
// adds a field never makes an older consumer drop events; the JSON Schemas
// are strict (no additional properties), so the contract itself changes only
// together with this package.
package events
