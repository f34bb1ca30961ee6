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
// Together 50 GiB, below GRAYGATE's 100G of JetStream storage on
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

// StreamNames names the five streams, in StreamConfigs' order.
func StreamNames() []string {
	return []string{StreamEvents, StreamStats, StreamRollout, StreamAnalysis, StreamPools}
}

// streamConfigs returns StreamConfigs(replicas) of the named streams, in
// the order named; none named: all five. A name that is not one of the
// five is an error.
func streamConfigs(replicas int, names []string) ([]jetstream.StreamConfig, error) {
	all := StreamConfigs(replicas)
	if len(names) == 0 {
		return all, nil
	}
	out := make([]jetstream.StreamConfig, 0, len(names))
	for _, name := range names {
		i := slices.IndexFunc(all, func(c jetstream.StreamConfig) bool { return c.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("events: no graygate stream %q (want one of %v)", name, StreamNames())
		}
		out = append(out, all[i])
	}
	return out, nil
}

// EnsureStreams creates each of the named streams that does not exist
// yet, with its StreamConfigs(replicas) configuration. A service names
// its own streams — those it publishes into or reads — and nothing else:
// its NATS identity may create only those (SPEC §7 "Who may write";
// infra/nats/accounts.conf imports STREAM.INFO and STREAM.CREATE per
// stream and identity), since a create request carries a whole
// configuration, republish, sources and mirror included. With no name it
// ensures all five (tests and tools on a server without accounts).
//
// An existing stream is never changed: when its subjects (or retention,
// storage, age, per-subject or duplicate-window limits) differ from this
// package's, a warning naming the differences is logged and the stream is
// used as it is — operators may manage streams by hand (infra/nats). One
// that moves messages beyond its definition (ForeignFlows) is refused
// with ErrForeignStream. It blocks for at most a few JetStream API round
// trips per stream; without a deadline on ctx, each stream gets 5
// seconds.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int, logger *slog.Logger, streams ...string) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	wants, err := streamConfigs(replicas, streams)
	if err != nil {
		return err
	}
	for _, want := range wants {
		if err := ensureStream(ctx, js, want, logger); err != nil {
			return err
		}
	}
	return nil
}

// CheckStreams reads the configuration of each named stream (none named:
// all five) and returns an error wrapping ErrForeignStream for the first
// that moves messages beyond graygate's definition (ForeignFlows). It
// creates nothing: a service checks with it the streams it does not use
// but whose foreign flows could reach what it owns (the analyzer: a
// stream another identity created with a republish into its lease
// bucket). missing names the streams that do not exist yet; as no service
// identity may update a stream, one found clean stays clean, and only a
// missing one is worth checking again. Without a deadline on ctx, each
// stream gets 5 seconds.
func CheckStreams(ctx context.Context, js jetstream.JetStream, streams ...string) (missing []string, err error) {
	wants, err := streamConfigs(1, streams)
	if err != nil {
		return nil, err
	}
	for _, want := range wants {
		found, err := checkStream(ctx, js, want)
		if err != nil {
			return missing, err
		}
		if !found {
			missing = append(missing, want.Name)
		}
	}
	return missing, nil
}

// streamCallContext gives a stream call 5 seconds when ctx sets no
// deadline.
func streamCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 5*time.Second)
}

func checkStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (found bool, err error) {
	ctx, cancel := streamCallContext(ctx)
	defer cancel()
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check stream %s: %w", want.Name, err)
	}
	return true, refuseForeign(s.CachedInfo().Config, want)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, logger *slog.Logger) error {
	ctx, cancel := streamCallContext(ctx)
	defer cancel()
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
	if err := refuseForeign(s.CachedInfo().Config, want); err != nil {
		return err
	}
	if diffs := StreamDiff(s.CachedInfo().Config, want); len(diffs) > 0 {
		logger.Warn("existing stream differs from graygate's definition; leaving it as it is",
			"stream", want.Name, "differences", diffs)
	}
	return nil
}

// refuseForeign returns an error wrapping ErrForeignStream when got moves
// messages beyond want (ForeignFlows).
func refuseForeign(got, want jetstream.StreamConfig) error {
	foreign := ForeignFlows(got, want)
	if len(foreign) == 0 {
		return nil
	}
	return fmt.Errorf("stream %s %s, which graygate's definition does not: "+
		"whoever created it can so move messages where it may not publish (SPEC §11 rev. 4); "+
		"delete the stream (nats stream rm %s), then create it from infra/nats/%s.json or start the services again: %w",
		want.Name, strings.Join(foreign, " and "), want.Name, want.Name, ErrForeignStream)
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
// identity may create its own streams when missing (EnsureStreams), and a
// create request carries the whole configuration: such a stream is the
// one way left to write into a stream or bucket through the server. A
// stream with no republish where want has one (made by rev. 3) moves
// nothing and is not listed.
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
