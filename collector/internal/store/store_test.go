package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

var ctx = context.Background()

// at is a fixed event time inside any retention the tests use.
var at = time.Now().UTC().Truncate(time.Hour).Add(-30 * time.Minute).Add(123456 * time.Microsecond)

func TestMigrate(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate) // migrated once
	applied, err := store.Migrate(ctx, pool, nil)
	if err != nil || len(applied) != 0 {
		t.Errorf("second Migrate = %v, %v; want nothing applied", applied, err)
	}
	rows, _ := pool.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	all, _ := store.Migrations()
	if err != nil || len(versions) != len(all) {
		t.Errorf("schema_migrations = %v, %v; want %d versions", versions, err, len(all))
	}
	// An applied migration must never change.
	if _, err := pool.Exec(ctx, `UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx, pool, nil); !errors.Is(err, store.ErrMigrationChanged) {
		t.Errorf("Migrate after an edit = %v; want ErrMigrationChanged", err)
	}
}

// Collectors that start together apply each migration exactly once.
func TestMigrateConcurrently(t *testing.T) {
	url := testenv.Database(t)
	const n = 4
	var wg sync.WaitGroup
	results := make([][]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := store.NewPool(url, 1)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			results[i], errs[i] = store.Migrate(ctx, pool, nil)
		}()
	}
	wg.Wait()
	total := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("collector %d: %v", i, errs[i])
		}
		total += len(results[i])
	}
	if all, _ := store.Migrations(); total != len(all) {
		t.Errorf("%d migrations applied in all; want %d (each once)", total, len(all))
	}
}

// row returns the row of event id in table as JSON (stored_at left out).
func row(t *testing.T, pool *pgxpool.Pool, table, id string) map[string]any {
	t.Helper()
	var b []byte
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'UTC'`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT to_jsonb(t.*) - 'stored_at' FROM `+table+` t WHERE event_id = $1`, id).Scan(&b)
	})
	if err != nil {
		t.Fatalf("read %s %s: %v", table, id, err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func pgTime(ts time.Time) string { return ts.UTC().Format("2006-01-02T15:04:05.999999") + "+00:00" }

func TestWriteEveryField(t *testing.T) {
	for _, mode := range []store.Mode{store.ModeCopy, store.ModeStage, store.ModeInsert} {
		t.Run(mode.String(), func(t *testing.T) {
			pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
			w := store.NewWriter(pool, store.Options{Mode: mode, Retention: 720 * time.Hour})
			ev := []store.Event{
				testenv.Event[store.Event](t, testenv.Request("qwen-32k", 1), at, ""),
				testenv.Event[store.Event](t, testenv.Primary("qwen-32k", 2), at, ""),
				testenv.Event[store.Event](t, testenv.Rejection("qwen-32k", 3), at, ""),
				testenv.Event[store.Event](t, withReplica(bothSample(testenv.Sample("qwen-32k", 4, events.ReasonSchemaViolation, events.ArmGray, []byte(`{"actoin":1}`))), "10.0.0.21:8000"), at, ""),
				testenv.Event[store.Event](t, testenv.Sample("qwen-32k", 5, events.ReasonInvalidJSON, events.ArmShadow, []byte{0xff, 0}), at, ""),
				testenv.Event[store.Event](t, testenv.Rollout("qwen-32k", 41), at, ""),
				testenv.Event[store.Event](t, testenv.Analysis("qwen-32k", at), at, ""),
			}
			for i := range ev {
				ev[i].Sequence = uint64(100 + i)
			}
			res, err := w.Write(ctx, ev)
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			wantInserted := map[string]int{events.TypeRequestCompleted: 2, events.TypeRequestRejected: 1,
				events.TypeSampleMalformed: 2, events.TypeRolloutChanged: 1, events.TypeAnalysisEvaluated: 1}
			if !reflect.DeepEqual(res.Inserted, wantInserted) {
				t.Errorf("Inserted = %v; want %v", res.Inserted, wantInserted)
			}
			common := func(i int) map[string]any {
				return map[string]any{"event_id": ev[i].Envelope.ID, "occurred_at": pgTime(at), "source": "gateway/test",
					"stream_seq": float64(100 + i)}
			}
			with := func(m map[string]any, kv map[string]any) map[string]any {
				for k, v := range kv {
					m[k] = v
				}
				return m
			}
			tests := []struct {
				table string
				i     int
				want  map[string]any
			}{
				{"requests", 0, with(common(0), map[string]any{"request_id": "req-qwen-32k-1", "route": "agent-chat",
					"deployment": "qwen-32k", "arm": "fallback", "upstream_model": "qwen2.5-32b-v1", "status": 200.0,
					"error_type": "none", "stream": false, "estimated_tokens": 1001.0, "matched_context": []any{"short_context", "any"},
					"prompt_tokens": 991.0, "completion_tokens": 77.0, "usage_estimated": true, "ttft_ms": 12.25,
					"latency_ms": 1500.5, "tool_calls": 2.0, "tool_steps": 3.0, "repeated_tool_call": true,
					"schema_valid": true, "fallback_reason": "schema_violation", "gray_status": 200.0,
					"gray_error_type": "upstream_schema", "gray_reason": "schema_violation", "gray_ttft_ms": 80.5,
					"gray_latency_ms": 700.25, "gray_prompt_tokens": 990.0, "gray_completion_tokens": 301.0,
					"gray_schema_valid": false, "replica": "10.0.0.11:8000", "cached_tokens": 512.0, "gray_replica": "10.0.0.21:8000",
					"arm_prompt_version": nil, "arm_prompt_hash": nil, "gray_arm_prompt_version": nil, "gray_arm_prompt_hash": nil})},
				{"requests", 1, with(common(1), map[string]any{"request_id": "req-qwen-32k-2", "route": "agent-chat",
					"deployment": "qwen-32k", "arm": "primary", "upstream_model": "qwen2.5-32b-v1", "status": 200.0,
					"error_type": "none", "stream": false, "estimated_tokens": 812.0, "matched_context": []any{},
					"prompt_tokens": 790.0, "completion_tokens": 64.0, "usage_estimated": false, "ttft_ms": 38.2,
					"latency_ms": 412.9, "tool_calls": 0.0, "tool_steps": 0.0, "repeated_tool_call": false,
					"schema_valid": nil, "fallback_reason": nil, "gray_status": nil, "gray_error_type": nil,
					"gray_reason": nil, "gray_ttft_ms": nil, "gray_latency_ms": nil, "gray_prompt_tokens": nil,
					"gray_completion_tokens": nil, "gray_schema_valid": nil, "replica": nil, "cached_tokens": nil, "gray_replica": nil,
					"arm_prompt_version": nil, "arm_prompt_hash": nil, "gray_arm_prompt_version": nil, "gray_arm_prompt_hash": nil})},
				{"rejections", 2, with(common(2), map[string]any{"request_id": "rej-qwen-32k-3", "route": "agent-chat",
					"deployment": "qwen-32k", "code": "sampling_contract_violation", "param": "temperature",
					"detail":           "temperature violates this deployment's sampling contract: got 0.5, expected 0.7 (or omit the field)",
					"estimated_tokens": 140.0})},
				{"samples", 3, with(common(3), map[string]any{"request_id": "smp-qwen-32k-4", "deployment": "qwen-32k",
					"arm": "gray", "upstream_model": "qwen2.5-32b-v2", "reason": "schema_violation", "status": 200.0,
					"validation_errors": []any{
						map[string]any{"field": "action", "description": "action is required (4)"},
						map[string]any{"field": "args.limit", "description": "Invalid type. Expected: integer, given: string"}},
					"payload": `\x7b226163746f696e223a317d`, "payload_base64": false, "payload_truncated": false,
					"payload_bytes": 12.0, "prompt_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
					"latency_ms": 812.5, "outcome": "schema_violation_both",
					"primary_validation_errors": []any{map[string]any{"field": "(finish_reason)", "description": "primary's answer was cut by the client's token limit"}},
					"primary_payload":           `\x5375726521`, "primary_payload_base64": false, "primary_payload_truncated": true,
					"primary_payload_bytes": 9.0, "replica": "10.0.0.21:8000", "arm_prompt_version": "v1.3", "arm_prompt_hash": armPromptHash})},
				{"samples", 4, with(common(4), map[string]any{"request_id": "smp-qwen-32k-5", "deployment": "qwen-32k",
					"arm": "shadow", "upstream_model": "qwen2.5-32b-v2", "reason": "invalid_json", "status": 200.0,
					"validation_errors": []any{
						map[string]any{"field": "action", "description": "action is required (5)"},
						map[string]any{"field": "args.limit", "description": "Invalid type. Expected: integer, given: string"}},
					"payload": `\xff00`, "payload_base64": true, "payload_truncated": false,
					"payload_bytes": 2.0, "prompt_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
					"latency_ms": 812.5, "outcome": nil, "primary_validation_errors": nil, "primary_payload": nil,
					"primary_payload_base64": nil, "primary_payload_truncated": nil, "primary_payload_bytes": nil, "replica": nil,
					"arm_prompt_version": nil, "arm_prompt_hash": nil})},
				{"rollout_events", 5, with(common(5), map[string]any{"deployment": "qwen-32k", "percentage": 12.34,
					"status": "rolled_back", "reason": "schema drift", "actor": "analyzer", "revision": 41.0,
					"trigger_gate": "schema_failure_rate", "trigger_value": 0.02, "trigger_bound": 0.011,
					"trigger_stream": nil, "trigger_threshold": 0.0, "trigger_window_seconds": 300.0,
					"operator": "", "hold": nil})},
				{"analysis_evaluations", 6, with(common(6), map[string]any{"deployment": "qwen-32k",
					"window_start": pgTime(at.Add(-5 * time.Minute)), "window_seconds": 300.0, "gray_requests": 51.0,
					"primary_requests": 2490.0, "verdict": "fail", "gates": []any{
						// A GateResult as the analyzer publishes it (rev. 3 adds needs_gray, always present).
						map[string]any{"gate": "token_inflation", "stream": nil, "estimate": 0.12, "bound": 0.05, "threshold": 0.3,
							"gray_n": 51.0, "primary_n": 2490.0, "verdict": "pass", "needs_gray": nil},
						map[string]any{"gate": "schema_failure_rate", "stream": nil, "estimate": 0.02, "bound": 0.02, "threshold": 0.0,
							"gray_n": 51.0, "primary_n": 2490.0, "verdict": "fail", "needs_gray": nil},
						map[string]any{"gate": "ttft_p99", "stream": true, "estimate": nil, "bound": nil, "threshold": 3.0,
							"gray_n": 3.0, "primary_n": 140.0, "verdict": "inconclusive", "needs_gray": nil}},
					// An evaluation without epoch or promotion (migration 7); TestOverviewQueries stores one with them.
					"epoch": nil, "step_since": nil, "passing_since": nil, "promotion": nil})},
			}
			for _, tt := range tests {
				got := row(t, pool, tt.table, ev[tt.i].Envelope.ID)
				if !reflect.DeepEqual(got, tt.want) {
					for k := range tt.want {
						if !reflect.DeepEqual(got[k], tt.want[k]) {
							t.Errorf("%s row %d column %s = %#v; want %#v", tt.table, tt.i, k, got[k], tt.want[k])
						}
					}
					for k := range got {
						if _, ok := tt.want[k]; !ok {
							t.Errorf("%s row %d has unchecked column %s = %#v", tt.table, tt.i, k, got[k])
						}
					}
				}
			}

			// The same batch again (a redelivery): nothing new.
			res, err = w.Write(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			for typ, n := range wantInserted {
				if res.Inserted[typ] != 0 || res.Duplicates[typ] != n {
					t.Errorf("rewrite %s: inserted %d duplicates %d; want 0 and %d", typ, res.Inserted[typ], res.Duplicates[typ], n)
				}
			}
			if n := count(t, pool, "requests"); n != 2 {
				t.Errorf("requests has %d rows after a rewrite; want 2", n)
			}
		})
	}
}

// bothSample makes s a schema_violation_both sample (rev. 3): primary's
// answer to the same request, cut at 5 of its 9 bytes, beside gray's.
func bothSample(s *events.SampleMalformed) *events.SampleMalformed {
	s.Outcome = events.OutcomeSchemaViolationBoth
	s.PrimaryValidationErrors = []events.ValidationError{{Field: "(finish_reason)", Description: "primary's answer was cut by the client's token limit"}}
	s.SetPrimaryPayload([]byte("Sure! ..."), 5)
	return s
}

// withReplica sets a sample's replica (rev. 4).
// withReplica sets the failing attempt's replica, and its arm's prompt.
func withReplica(s *events.SampleMalformed, replica string) *events.SampleMalformed {
	s.Replica = replica
	s.ArmPromptVersion, s.ArmPromptHash = "v1.3", armPromptHash
	return s
}

// armPromptHash is the failing arm's prompt hash withReplica sets.
var armPromptHash = strings.Repeat("0f", 32)

// One batch holding the same event twice stores it once.
func TestWriteDuplicateInBatch(t *testing.T) {
	for _, mode := range []store.Mode{store.ModeCopy, store.ModeStage, store.ModeInsert} {
		t.Run(mode.String(), func(t *testing.T) {
			pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
			w := store.NewWriter(pool, store.Options{Mode: mode})
			e := testenv.Event[store.Event](t, testenv.Primary("d", 1), at, "")
			res, err := w.Write(ctx, []store.Event{e, e})
			if err != nil {
				t.Fatal(err)
			}
			if res.Inserted[events.TypeRequestCompleted] != 1 || res.Duplicates[events.TypeRequestCompleted] != 1 {
				t.Errorf("Result = %+v; want 1 inserted, 1 duplicate", res)
			}
		})
	}
}

func partitionsOf(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, _ := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestRetention(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	now := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	keepAll := store.NewWriter(pool, store.Options{Now: clock})
	old := []store.Event{
		testenv.Event[store.Event](t, testenv.Primary("d", 1), now.AddDate(0, 0, -5), ""),
		testenv.Event[store.Event](t, testenv.Primary("d", 2), now.AddDate(0, 0, -3), ""),
		testenv.Event[store.Event](t, testenv.Primary("d", 3), now.Add(-49*time.Hour), ""),
		testenv.Event[store.Event](t, testenv.Sample("d", 4, events.ReasonTimeout, events.ArmGray, nil), now.AddDate(0, 0, -5), ""),
	}
	if _, err := keepAll.Write(ctx, old); err != nil {
		t.Fatal(err)
	}
	want := []string{"requests_p20250309", "requests_p20250311", "requests_p20250312"}
	if got := partitionsOf(t, pool, "requests"); !reflect.DeepEqual(got, want) {
		t.Fatalf("partitions = %v; want %v (one per day written)", got, want)
	}

	w := store.NewWriter(pool, store.Options{Now: clock, Retention: 48 * time.Hour})
	batch := []store.Event{
		testenv.Event[store.Event](t, testenv.Primary("d", 5), now.Add(-49*time.Hour), ""), // expired
		testenv.Event[store.Event](t, testenv.Primary("d", 6), now.Add(-47*time.Hour), ""),
		testenv.Event[store.Event](t, testenv.Rollout("d", 1), now.AddDate(-1, 0, 0), ""),  // rollout history is kept
		testenv.Event[store.Event](t, testenv.Primary("d", 7), now.Add(4*time.Minute), ""), // within events.MaxStatsFuture
	}
	res, err := w.Write(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired[events.TypeRequestCompleted] != 1 || res.Inserted[events.TypeRequestCompleted] != 2 || res.Inserted[events.TypeRolloutChanged] != 1 {
		t.Errorf("Result = %+v; want 1 request expired, 2 inserted, the rollout inserted", res)
	}
	dropped, err := w.DropExpired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The cutoff is 2025-03-12 12:00: days ending at or before it go.
	sort.Strings(dropped)
	if want := []string{"requests_p20250309", "requests_p20250311", "samples_p20250309"}; !reflect.DeepEqual(dropped, want) {
		t.Errorf("DropExpired = %v; want %v", dropped, want)
	}
	if got, want := partitionsOf(t, pool, "requests"), []string{"requests_p20250312", "requests_p20250314"}; !reflect.DeepEqual(got, want) {
		t.Errorf("partitions after retention = %v; want %v", got, want)
	}
	// The writer recreates a dropped day's partition if an event for it
	// is still inside the retention.
	if _, err := w.Write(ctx, []store.Event{testenv.Event[store.Event](t, testenv.Primary("d", 8), now.Add(-1*time.Minute), "")}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "requests"); n != 4 {
		t.Errorf("requests has %d rows; want 4 (day -2 one, 2 new, 1 more)", n)
	}
}

func TestMaxPayloadBytes(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{MaxPayloadBytes: 4})
	e := testenv.Event[store.Event](t, testenv.Sample("d", 1, events.ReasonInvalidJSON, events.ArmGray, []byte("abcdefgh")), at, "")
	if _, err := w.Write(ctx, []store.Event{e}); err != nil {
		t.Fatal(err)
	}
	got := row(t, pool, "samples", e.Envelope.ID)
	if got["payload"] != `\x61626364` || got["payload_truncated"] != true || got["payload_bytes"] != 8.0 {
		t.Errorf("stored payload %v truncated %v bytes %v; want abcd, true, 8", got["payload"], got["payload_truncated"], got["payload_bytes"])
	}
}

// The collector's cut never splits a character, so a cut text sample is
// still read back as text; the failing arm's prompt is kept (SPEC §7).
func TestSampleCutAndPrompt(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{MaxPayloadBytes: 4})
	s := testenv.Sample("d", 1, events.ReasonSchemaViolation, events.ArmGray, []byte("abc\u00e9def"))
	s.ArmPromptVersion, s.ArmPromptHash = "v1.3", strings.Repeat("ab", 32)
	e := testenv.Event[store.Event](t, s, at, "")
	if _, err := w.Write(ctx, []store.Event{e}); err != nil {
		t.Fatal(err)
	}
	got, err := store.NewReader(pool).Sample(ctx, uuid.MustParse(e.Envelope.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got.Payload != "abc" || got.PayloadBase64 != "" || !got.PayloadTruncated {
		t.Errorf("payload %q, base64 %q, truncated %v; want the text abc, cut before the é", got.Payload, got.PayloadBase64, got.PayloadTruncated)
	}
	if got.ArmPromptVersion != "v1.3" || got.ArmPromptHash != s.ArmPromptHash {
		t.Errorf("arm prompt %q %q; want v1.3 and its hash", got.ArmPromptVersion, got.ArmPromptHash)
	}
}

// A redelivered batch that also holds new events stores exactly the new ones.
func TestWriteMixedBatch(t *testing.T) {
	for _, mode := range []store.Mode{store.ModeCopy, store.ModeStage, store.ModeInsert} {
		t.Run(mode.String(), func(t *testing.T) {
			pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
			w := store.NewWriter(pool, store.Options{Mode: mode})
			var old, mixed []store.Event
			for i := range 3 {
				old = append(old, testenv.Event[store.Event](t, testenv.Primary("d", i), at, ""))
			}
			if _, err := w.Write(ctx, old); err != nil {
				t.Fatal(err)
			}
			mixed = append(mixed, testenv.Event[store.Event](t, testenv.Primary("d", 10), at, ""))
			mixed = append(mixed, old...)
			mixed = append(mixed, testenv.Event[store.Event](t, testenv.Rejection("d", 11), at, ""))
			res, err := w.Write(ctx, mixed)
			if err != nil {
				t.Fatal(err)
			}
			if res.Inserted[events.TypeRequestCompleted] != 1 || res.Duplicates[events.TypeRequestCompleted] != 3 || res.Inserted[events.TypeRequestRejected] != 1 {
				t.Errorf("Result = %+v; want 1 new request, 3 duplicates, 1 rejection", res)
			}
			if n := count(t, pool, "requests"); n != 4 {
				t.Errorf("requests has %d rows; want 4", n)
			}
		})
	}
}
