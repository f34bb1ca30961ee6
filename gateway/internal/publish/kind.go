package publish

import schema "github.com/graygate/graygate/schemas/events"

// Kind is the class of an event, the `kind` label of the event metrics.
type Kind uint8

// Kinds of the events the gateway publishes.
const (
	KindRequest   Kind = iota // graygate.request.completed
	KindRejection             // graygate.request.rejected
	KindSample                // graygate.sample.malformed
	KindRollout               // graygate.rollout.changed
	KindStats                 // graygate.stats.interval
	KindReplicas              // graygate.replicas.status (rev. 4)
	numKinds
)

var kindNames = [numKinds]string{"request", "rejection", "sample", "rollout", "stats", "replicas"}

// String returns the metric label of k.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "unknown"
}

// kindOf classifies d; false for a type the gateway does not publish.
func kindOf(d schema.Data) (Kind, bool) {
	switch d.(type) {
	case *schema.RequestCompleted:
		return KindRequest, true
	case *schema.RequestRejected:
		return KindRejection, true
	case *schema.SampleMalformed:
		return KindSample, true
	case *schema.RolloutChanged:
		return KindRollout, true
	case *schema.StatsInterval:
		return KindStats, true
	case *schema.ReplicasStatus:
		return KindReplicas, true
	}
	return 0, false
}
