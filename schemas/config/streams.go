package config

import "time"

// BufferedStreamFloor is the shortest rollout timeout at which a canary
// gray in stream_validation: buffer can serve ordinary streams: 10 s is
// a 500-token answer at 50 tokens/s (a chat answer of a few paragraphs
// from a 30B-class model on one GPU; reasoning models stream for
// minutes).
const BufferedStreamFloor = 10 * time.Second

// warnBufferedStreams warns where a canary gray validates streams in
// buffer mode under a rollout timeout shorter than BufferedStreamFloor. In
// buffer mode a gray-served stream client receives nothing until the
// whole answer is generated and validated, and the rollout timeout bounds
// that whole generation: every stream longer than the timeout falls back
// to primary after waiting it out, so gray serves none of the long ones
// and adds the timeout to their time to first token.
func (d *decoder) warnBufferedStreams(c *Config) {
	for _, name := range c.DeploymentOrder {
		dep := c.Deployments[name]
		if dep == nil || dep.Gray == nil {
			continue
		}
		r := dep.Rollout
		if r.Mode != ModeCanary || r.StreamValidation != StreamBuffer || r.Timeout <= 0 || r.Timeout >= BufferedStreamFloor {
			continue
		}
		d.warnf("deployments."+name+".rollout.stream_validation", nil,
			"buffer with timeout %s: gray serves only streams whose whole answer is generated within %s (about %d tokens at 50 tokens/s); "+
				"every longer stream waits %s with nothing sent, then falls back to primary. For streamed traffic use stream_validation: observe, "+
				"or a timeout of at least %s",
			r.Timeout, r.Timeout, int(r.Timeout.Seconds()*50), r.Timeout, BufferedStreamFloor)
	}
}
