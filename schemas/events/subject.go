package events

// Event types (the envelope's `type`).
const (
	TypeRequestCompleted  = "graygate.request.completed"
	TypeRequestRejected   = "graygate.request.rejected"
	TypeSampleMalformed   = "graygate.sample.malformed"
	TypeRolloutChanged    = "graygate.rollout.changed"
	TypeAnalysisEvaluated = "graygate.analysis.evaluated"
	TypeStatsInterval     = "graygate.stats.interval"
	TypeReplicasStatus    = "graygate.replicas.status" // (rev. 4)
)

// Types lists every event type, in the order of SPEC §7.
var Types = []string{TypeRequestCompleted, TypeRequestRejected, TypeSampleMalformed, TypeStatsInterval, TypeRolloutChanged, TypeAnalysisEvaluated, TypeReplicasStatus}

// Stream names (SPEC §7).
const (
	StreamEvents   = "GRAYGATE_EVENTS"   // request, rejection and sample events
	StreamRollout  = "GRAYGATE_ROLLOUT"  // rollout state changes, the last 100 per deployment
	StreamAnalysis = "GRAYGATE_ANALYSIS" // analyzer evaluations
	StreamStats    = "GRAYGATE_STATS"    // per-arm statistics of every gateway (rev. 2)
	StreamPools    = "GRAYGATE_POOLS"    // each gateway's view of each deployment's replicas (rev. 4)
)

// Subject prefixes; the last token is a deployment name or, for rejections,
// the rejection code. Deployment names are [A-Za-z0-9_-]+ (config rule), so
// they are always one subject token.
const (
	SubjectRequestPrefix   = "graygate.request."
	SubjectRejectionPrefix = "graygate.rejection."
	SubjectSamplePrefix    = "graygate.sample."
	SubjectRolloutPrefix   = "graygate.rollout."
	SubjectAnalysisPrefix  = "graygate.analysis."
	SubjectStatsPrefix     = "graygate.stats."
	SubjectReplicasPrefix  = "graygate.replicas."
)

// Wildcard subjects, one per prefix, as the streams bind them and consumers
// filter on them.
const (
	SubjectRequestAll   = SubjectRequestPrefix + ">"
	SubjectRejectionAll = SubjectRejectionPrefix + ">"
	SubjectSampleAll    = SubjectSamplePrefix + ">"
	SubjectRolloutAll   = SubjectRolloutPrefix + ">"
	SubjectAnalysisAll  = SubjectAnalysisPrefix + ">"
	SubjectStatsAll     = SubjectStatsPrefix + ">"
	SubjectReplicasAll  = SubjectReplicasPrefix + ">"
)

// SubjectRolloutStoredAll is where GRAYGATE_ROLLOUT republishes the
// headers of each rollout event once stored (rev. 4). On infra/nats the
// readers' accounts import it as graygate.rollout.>, the subject their
// bell listens on, so they are rung by what was stored, never by a
// publish (SPEC §11 rev. 4: publish and notification on distinct subjects).
const SubjectRolloutStoredAll = "graygate.stored.rollout.>"

// RequestSubject is where a deployment's request.completed events go.
func RequestSubject(deployment string) string { return SubjectRequestPrefix + deployment }

// RejectionSubject is where request.rejected events with code go.
func RejectionSubject(code RejectionCode) string { return SubjectRejectionPrefix + string(code) }

// SampleSubject is where a deployment's sample.malformed events go.
func SampleSubject(deployment string) string { return SubjectSamplePrefix + deployment }

// RolloutSubject is where a deployment's rollout.changed events go; the
// last message on it is the deployment's rollout state.
func RolloutSubject(deployment string) string { return SubjectRolloutPrefix + deployment }

// AnalysisSubject is where a deployment's analysis.evaluated events go.
func AnalysisSubject(deployment string) string { return SubjectAnalysisPrefix + deployment }

// StatsSubject is where a deployment's stats.interval events go.
func StatsSubject(deployment string) string { return SubjectStatsPrefix + deployment }

// ReplicasSubject is where a deployment's replicas.status events go (rev. 4).
func ReplicasSubject(deployment string) string { return SubjectReplicasPrefix + deployment }
