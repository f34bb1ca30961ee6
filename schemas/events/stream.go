package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream limits of SPEC §7 (infra/nats/*.json say the same).
const (
	// EventsMaxAge and AnalysisMaxAge: request, rejection, sample and
	// analysis events are kept a week.
	EventsMaxAge   = 7 * 24 * time.Hour
	AnalysisMaxAge = 7 * 24 * time.Hour
	StatsMaxAge    = 7 * 24 * time.Hour
	// PoolsMaxAge: replica views are kept a day (rev. 4); the collector
	// keeps the latest of each gateway and deployment.
	PoolsMaxAge = 24 * time.Hour
	// RolloutPerSubject: the last 100 rollout events of each deployment.
	RolloutPerSubject = 100
	// DuplicateWindow: a Nats-Msg-Id republished within it is stored once.
	DuplicateWindow = 2 * time.Minute
)

// Each stream's max_bytes (SPEC §11 rev. 4): the oldest messages go when
// a stream is full, so a flood fills a bounded disk, not the server's.
// Together 57 GiB, below GRAYGATE's 100G of JetStream storage on
// infra/nats (the analyzer's buckets take the rest, README.md "Limits").
// GRAYGATE_POOLS' 1 GiB holds a day of 100 gateways × 20 deployments
// at a status of ~3 KB every 10 s (rev. 4).
const (
	EventsMaxBytes   = 32 << 30
	StatsMaxBytes    = 8 << 30
	RolloutMaxBytes  = 1 << 30
	AnalysisMaxBytes = 8 << 30
	PoolsMaxBytes    = 1 << 30
)

// StreamConfigs returns the configurations of the five streams with the
// given replica count (nats.replicas; below 1 means 1).
func StreamConfigs(replicas int) []jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	base := func(name, desc string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:              name,
			Description:       desc,
			Subjects:          subjects,
			Retention:         jetstream.LimitsPolicy,
			MaxConsumers:      -1,
			MaxMsgs:           -1,
			MaxBytes:          -1,
			MaxMsgsPerSubject: -1,
			MaxMsgSize:        -1,
			Storage:           jetstream.FileStorage,
			Discard:           jetstream.DiscardOld,
			Replicas:          replicas,
			Duplicates:        DuplicateWindow,
		}
	}
	ev := base(StreamEvents, "graygate request, rejection and failed-sample events (SPEC §7)",
		SubjectRequestAll, SubjectRejectionAll, SubjectSampleAll)
	ev.MaxAge, ev.MaxBytes = EventsMaxAge, EventsMaxBytes
	ro := base(StreamRollout, "graygate rollout state changes, the last 100 per deployment (SPEC §7)", SubjectRolloutAll)
	ro.MaxMsgsPerSubject, ro.MaxBytes = RolloutPerSubject, RolloutMaxBytes
	ro.RePublish = &jetstream.RePublish{Source: SubjectRolloutAll, Destination: SubjectRolloutStoredAll, HeadersOnly: true}
	an := base(StreamAnalysis, "graygate analyzer evaluations: gate values and verdicts (SPEC §7)", SubjectAnalysisAll)
	an.MaxAge, an.MaxBytes = AnalysisMaxAge, AnalysisMaxBytes
	st := base(StreamStats, "graygate per-arm statistics, one event per gateway, deployment and stats_interval (SPEC §7)", SubjectStatsAll)
	st.MaxAge, st.MaxBytes = StatsMaxAge, StatsMaxBytes
	po := base(StreamPools, "graygate replica pools: each gateway's view of each deployment's replicas every 10 s (SPEC §6.7, rev. 4)", SubjectReplicasAll)
	po.MaxAge, po.MaxBytes = PoolsMaxAge, PoolsMaxBytes
	return []jetstream.StreamConfig{ev, st, ro, an, po}
}

// EnsureStreams creates each of the five streams that does not exist yet,
// with StreamConfigs(replicas). An existing stream is never changed: when
// its subjects (or retention, storage, age, per-subject or duplicate-window
// limits) differ from this package's, a warning naming the differences is
// logged and the stream is used as it is — operators may manage streams by
// hand (infra/nats). It blocks for at most a few JetStream API round trips;
// without a deadline on ctx, each call gets 5 seconds.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for _, want := range StreamConfigs(replicas) {
		if err := ensureStream(ctx, js, want, logger); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, logger *slog.Logger) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, want)
		switch {
		case err == nil:
			logger.Info("created stream", "stream", want.Name, "subjects", want.Subjects, "replicas", want.Replicas)
			return nil
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse): // another service won the race
			s, err = js.Stream(ctx, want.Name)
		}
	}
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", want.Name, err)
	}
	if foreign := ForeignFlows(s.CachedInfo().Config, want); len(foreign) > 0 {
		return fmt.Errorf("stream %s %s, which graygate's definition does not: "+
			"whoever created it can so move messages where it may not publish (SPEC §11 rev. 4); "+
			"delete the stream (nats stream rm %s) and start the services again: %w",
			want.Name, strings.Join(foreign, " and "), want.Name, ErrForeignStream)
	}
	if diffs := StreamDiff(s.CachedInfo().Config, want); len(diffs) > 0 {
		logger.Warn("existing stream differs from graygate's definition; leaving it as it is",
			"stream", want.Name, "differences", diffs)
	}
	return nil
}

// StreamDiff lists how got differs from want in what graygate relies on:
// subjects (in any order), retention, storage, max age, messages per
// subject, duplicate window, the republish of stored rollout events (what
// rings the readers on infra/nats), and a byte limit (a stream without
// one can fill the server's disk, SPEC §11 rev. 4). Replicas,
// descriptions, the size of the byte limit and other limits are the
// operator's to choose.
func StreamDiff(got, want jetstream.StreamConfig) []string {
	var d []string
	gs, ws := slices.Sorted(slices.Values(got.Subjects)), slices.Sorted(slices.Values(want.Subjects))
	if !slices.Equal(gs, ws) {
		d = append(d, fmt.Sprintf("subjects %v, want %v", got.Subjects, want.Subjects))
	}
	if got.Retention != want.Retention {
		d = append(d, fmt.Sprintf("retention %v, want %v", got.Retention, want.Retention))
	}
	if got.Storage != want.Storage {
		d = append(d, fmt.Sprintf("storage %v, want %v", got.Storage, want.Storage))
	}
	if got.MaxAge != want.MaxAge {
		d = append(d, fmt.Sprintf("max_age %v, want %v", got.MaxAge, want.MaxAge))
	}
	if got.MaxMsgsPerSubject != want.MaxMsgsPerSubject {
		d = append(d, fmt.Sprintf("max_msgs_per_subject %d, want %d", got.MaxMsgsPerSubject, want.MaxMsgsPerSubject))
	}
	if got.Duplicates != want.Duplicates {
		d = append(d, fmt.Sprintf("duplicate_window %v, want %v", got.Duplicates, want.Duplicates))
	}
	if !reflect.DeepEqual(got.RePublish, want.RePublish) {
		d = append(d, fmt.Sprintf("republish %s, want %s", republishString(got.RePublish), republishString(want.RePublish)))
	}
	if got.MaxBytes <= 0 && want.MaxBytes > 0 {
		d = append(d, fmt.Sprintf("no max_bytes, want a limit (graygate's is %d)", want.MaxBytes))
	}
	return d
}

// ErrForeignStream: an existing stream moves messages to or from other
// subjects in a way graygate never defines (ForeignFlows).
var ErrForeignStream = errors.New("stream with a foreign configuration")

// ForeignFlows lists how got moves messages beyond want: a republish
// that want does not have (a stream's stored messages published again
// on any subject, a KV bucket's included, with the server's rights),
// and sources or a mirror (another stream's messages copied in). Each
// identity may create its missing streams, and a create request carries
// the whole configuration: such a stream is the one way left to write
// into a stream or bucket through the server. A stream with no republish
// where want has one (made by rev. 3) moves nothing and is not listed.
func ForeignFlows(got, want jetstream.StreamConfig) []string {
	var f []string
	if got.RePublish != nil && !reflect.DeepEqual(got.RePublish, want.RePublish) {
		f = append(f, "republishes "+republishString(got.RePublish))
	}
	if len(got.Sources) > 0 {
		names := make([]string, len(got.Sources))
		for i, src := range got.Sources {
			names[i] = src.Name
		}
		f = append(f, "sources "+strings.Join(names, ", "))
	}
	if got.Mirror != nil {
		f = append(f, "mirrors "+got.Mirror.Name)
	}
	return f
}

func republishString(r *jetstream.RePublish) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s → %s (headers only %v)", r.Source, r.Destination, r.HeadersOnly)
}
