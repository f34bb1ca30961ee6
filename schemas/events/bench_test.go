package events_test

import (
	"encoding/json"
	"testing"

	"github.com/graygate/graygate/schemas/events"
)

// BenchmarkNewEnvelope is a producer's cost per event: wrap, check and
// marshal a request.completed (the gateway's per-request event).
func BenchmarkNewEnvelope(b *testing.B) {
	d := full()[0]
	b.ReportAllocs()
	for b.Loop() {
		env, err := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", d, exampleTime, testID)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewEnvelopeOnly is NewEnvelope alone, as the gateway calls it
// for a request.completed: check, a new id, and the data's JSON.
func BenchmarkNewEnvelopeOnly(b *testing.B) {
	d := full()[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", d, exampleTime, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is a consumer's cost per event: Decode and DecodeData of
// a request.completed.
func BenchmarkDecode(b *testing.B) {
	env, _ := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", full()[0], exampleTime, testID)
	msg, _ := json.Marshal(env)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		env, err := events.Decode(msg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := events.DecodeData(env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEvent is DecodeEvent on the same event as BenchmarkDecode.
func BenchmarkDecodeEvent(b *testing.B) {
	env, _ := events.NewEnvelope(events.TypeRequestCompleted, "gateway/h", full()[0], exampleTime, testID)
	msg, _ := json.Marshal(env)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := events.DecodeEvent(msg); err != nil {
			b.Fatal(err)
		}
	}
}
