package store_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
	"github.com/graygate/graygate/scripts/testenv"
)

// TestOverviewQueries stores an evaluation with its epoch, step, hold and
// promotion rule, statistics carrying each arm's prompt and fingerprint,
// and requests naming each arm's model, and reads back what the console's
// overview shows: the evaluation as published, and each arm's identity
// from the newest events (an older fingerprint is not shown).
func TestOverviewQueries(t *testing.T) {
	pool, _ := testenv.Pool(t, store.NewPool, store.Migrate)
	w := store.NewWriter(pool, store.Options{Retention: 720 * time.Hour})
	r := store.NewReader(pool)
	dep, bare := "overview-q", "overview-bare"
	now := time.Now().UTC().Truncate(time.Second)
	step, passing := now.Add(-20*time.Minute), now.Add(-6*time.Minute)
	a := testenv.Analysis(dep, now.Add(-time.Minute))
	a.Epoch = &events.EpochInfo{Start: now.Add(-3 * time.Hour), Index: 2, GrayFingerprint: "00112233445566aa",
		PrimaryFingerprint: "00112233445566bb", Periods: 3, MinPercentage: 1, GrayRequests: 5100, PrimaryRequests: 90000, Rebuilt: true}
	a.StepSince, a.StepSeconds, a.PassingSince = &step, 1140, &passing
	a.Promotion = &events.PromotionRule{Steps: []float64{1, 5, 10, 100}, HoldSeconds: 600, MinSoakSeconds: 86400, MinPercentage: 1}
	hash := strings.Repeat("ab", 32)
	stats := func(at time.Time, grayFP string) *events.StatsInterval {
		s := testenv.Stats(dep, "gw/1", at)
		s.Arms[0].ArmPromptVersion, s.Arms[0].ArmPromptHash, s.Arms[0].ArmFingerprint = "v1.4", hash, grayFP
		s.Arms[1].ArmFingerprint = "00112233445566bb"
		return s
	}
	gray := testenv.Primary(dep, 2)
	gray.Arm, gray.UpstreamModel = events.ArmGray, "qwen3-32b"
	ev := []store.Event{
		testenv.Event[store.Event](t, a, now.Add(-time.Minute), ""),
		testenv.Event[store.Event](t, testenv.Analysis(bare, now.Add(-time.Minute)), now.Add(-time.Minute), ""),
		testenv.Event[store.Event](t, stats(now.Add(-10*time.Minute), "ffffffffffffffff"), now, ""),
		testenv.Event[store.Event](t, stats(now.Add(-2*time.Minute), "00112233445566aa"), now, ""),
		testenv.Event[store.Event](t, testenv.Primary(dep, 1), now.Add(-3*time.Minute), ""),
		testenv.Event[store.Event](t, gray, now.Add(-3*time.Minute), ""),
	}
	if _, err := w.Write(ctx, ev); err != nil {
		t.Fatalf("Write: %v", err)
	}

	got, err := r.LatestEvaluation(ctx, dep)
	if err != nil || got == nil {
		t.Fatalf("LatestEvaluation = %v, %v", got, err)
	}
	wantEpoch := *a.Epoch
	wantEpoch.Start = wantEpoch.Start.UTC()
	if got.Epoch == nil || !reflect.DeepEqual(*got.Epoch, wantEpoch) {
		t.Errorf("epoch = %+v; want %+v", got.Epoch, wantEpoch)
	}
	if got.Promotion == nil || !reflect.DeepEqual(*got.Promotion, *a.Promotion) {
		t.Errorf("promotion = %+v; want %+v", got.Promotion, a.Promotion)
	}
	if got.StepSince == nil || !got.StepSince.Equal(step) || got.PassingSince == nil || !got.PassingSince.Equal(passing) {
		t.Errorf("step since %v, passing since %v; want %v, %v", got.StepSince, got.PassingSince, step, passing)
	}
	old, err := r.LatestEvaluation(ctx, bare)
	if err != nil || old == nil || old.Epoch != nil || old.Promotion != nil || old.StepSince != nil || old.PassingSince != nil {
		t.Errorf("an evaluation without epoch or promotion reads %+v, %v; want them nil", old, err)
	}

	arms, err := r.Arms(ctx, dep, now)
	if err != nil {
		t.Fatalf("Arms: %v", err)
	}
	want := []store.ArmIdentity{
		{Arm: "primary", Model: "qwen2.5-32b-v1", Fingerprint: "00112233445566bb", SeenAt: now.Add(-2 * time.Minute)},
		{Arm: "gray", Model: "qwen3-32b", PromptVersion: "v1.4", PromptHash: hash, Fingerprint: "00112233445566aa", SeenAt: now.Add(-2 * time.Minute)},
	}
	if !reflect.DeepEqual(arms, want) {
		t.Errorf("Arms =\n%+v\nwant\n%+v", arms, want)
	}
	if arms, err := r.Arms(ctx, dep, now.Add(48*time.Hour)); err != nil || len(arms) != 0 {
		t.Errorf("Arms two days later = %+v, %v; want none (older than the lookback)", arms, err)
	}

	// The attempt charts read each row's outcomes per arm (migration 7),
	// and the entries of a row stored before it: the same counts.
	sum := func() map[string]int64 {
		t.Helper()
		bins, _, err := r.ArmSeries(ctx, dep, now.Add(-time.Hour), now, 100)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, b := range bins {
			for o, n := range b.Outcomes {
				if n > 0 {
					out[b.Arm+"/"+o] += n
				}
			}
		}
		return out
	}
	wantN := map[string]int64{"gray/ok": 6, "gray/timeout": 2, "primary/ok": 80, "primary/timeout": 2}
	if got := sum(); !reflect.DeepEqual(got, wantN) {
		t.Errorf("ArmSeries from outcomes = %v; want %v", got, wantN)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT outcomes FROM arm_stats WHERE deployment = $1 LIMIT 1`, dep).Scan(&stored); err != nil ||
		!strings.Contains(string(stored), `"gray": {"ok": 3,`) {
		t.Errorf("arm_stats.outcomes = %s, %v; want gray's and primary's sums", stored, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE arm_stats SET outcomes = NULL WHERE deployment = $1`, dep); err != nil {
		t.Fatal(err)
	}
	if got := sum(); !reflect.DeepEqual(got, wantN) {
		t.Errorf("ArmSeries from entries = %v; want %v", got, wantN)
	}
}
