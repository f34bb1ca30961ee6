package main

import (
	"fmt"
	"strings"
)

// legend says how the drill runs and how each column is measured;
// document puts it under the table in docs/drill.md.
const legend = `## Running it

` + "`task drill`" + ` builds the binaries and nats-server (go.mod's version), brings
up devenv's Postgres (the drill uses a database of its own,
` + "`graygate_drill`" + `, dropped and created at each run) and runs
` + "`go run ./scripts/drill`" + `. Everything else is its own and on loopback:
three nats-servers, whose configuration includes the shipped
` + "`infra/nats/nats-server.conf`" + ` and adds a name, addresses, a store and a
cluster block with TLS routes; certificates from a copy of the shipped
` + "`infra/nats/make-dev-certs.sh`" + ` (with clientAuth added when the script
makes none, which the notes then say); a TCP proxy in front of every
node's route listener, through which every route goes; mock upstreams,
the collector, two gateways and two analyzers. Files and logs are under
` + "`.data/drill/`" + `; every process the drill started is stopped when it
ends, fails or is interrupted (and killed with it if it is killed).
Flags after ` + "`--`" + `: ` + "`--outage`" + ` (20 s) and ` + "`--long-outage`" + ` (45 s, quorum
loss), ` + "`--break-after`" + `, ` + "`--rate`" + ` (40 requests/s), ` + "`--faults`" + ` (a
comma-separated subset, e.g. ` + "`--faults partition`" + `), ` + "`--json`" + ` (the
result as JSON on stdout), ` + "`--doc`" + ` (where to write this file; empty:
nowhere). ` + "`task test`" + ` runs ` + "`TestClusterPartition`" + ` (the cluster on the
shipped configuration, one node partitioned and healed, about 5 s) and
` + "`TestMiniDrill`" + ` (one 8 s fault on the real binaries, about 30 s).

## How each column is measured

- **client errors**: requests whose answer was not the expected one (a
  200, or the 400 of a request that breaks the sampling contract on
  purpose, one in 20), or that got no answer.
- **events sent / stored, lost, duplicated**: every request a gateway
  answered must be stored once by the collector (request_log: all), as a
  row of ` + "`requests`" + ` or ` + "`rejections`" + ` with its request id; lost is
  answered and never stored (after the collector had up to 3 minutes to
  catch up), duplicated is rows beyond the first for one request. Postgres
  keys rows by event id, so an event stored twice in the stream shows in
  the totals line (stream messages against distinct stored event ids).
- **longest with no lease holder**: the longest run of the drill's looks
  at both analyzers' /metrics (every 200 ms) in which neither said
  ` + "`graygate_analyzer_lease_held 1`" + ` (a SIGSTOPped analyzer holds nothing it
  can act on).
- **vacancy reported**: how long after that vacancy's start an analyzer
  first exported ` + "`graygate_analyzer_lease_vacant_seconds`" + ` above 0, and first
  answered /readyz 503 ` + "`no analyzer holds the lease`" + ` (looked for within a
  minute); required of a vacancy longer than 2 × lease_ttl (the drill's
  analyzers have lease_ttl 10s).
- **two analyzers acting**: from the ` + "`lease`" + ` {holder, revision} of the
  analyzers' rollout events, in stream order: an event on an older lease
  revision than one already used, or on the same revision by another
  holder. **two holders (metrics)**: the time both analyzers' metrics
  said they held the lease.
- **rollback stored → every gateway at 0 %**: from the rollback's stream
  timestamp to the first look at which the last gateway's
  /admin/rollouts showed it (each gateway is looked at every 10 ms while a
  rollback is due, so figures carry up to about 10 ms of polling).
- **first failing gray answer → rollback stored**: from the first answer
  served by the fallback after the gray upstream started breaking its
  schema (the gray attempt failed) to the rollback's stream timestamp.
  Add the column before it for the time to the rollback applied.

Each fault runs as one phase: the gray is put back at 20 % (PUT
/admin/rollouts) and its upstream healthy, healthy traffic for a few
seconds, the fault, the gray upstream breaking its schema a few seconds
into it, the heal, then the phase waits for the rollback on every gateway
and for the cluster to be healthy again. Everything runs on loopback on
one machine; the NATS nodes include the shipped
` + "`infra/nats/nats-server.conf`" + ` and serve the certificates of the shipped
` + "`infra/nats/make-dev-certs.sh`" + `; streams have 3 replicas.
`

// document is docs/drill.md for a run.
func document(res *result) string {
	var b strings.Builder
	b.WriteString("# Cluster fault drill\n\n")
	b.WriteString("`task drill` (scripts/drill) brings up a three-node JetStream cluster, two\n")
	b.WriteString("analyzers, two gateways, the collector and mock upstreams on loopback, and\n")
	b.WriteString("injects one fault after another under traffic while a gray starts failing\n")
	b.WriteString("(SPEC §11 and §12 rev. 4, \"cluster\"). This file is written by the drill.\n\n")
	fmt.Fprintf(&b, "Run on %s, commit %s, with `%s`.\n\n", res.Date, res.Commit, res.Command)
	b.WriteString("The faults, in the order they ran:\n\n")
	for _, r := range res.Rows {
		fmt.Fprintf(&b, "- **%s**: %s.\n", r.Fault, r.What)
	}
	b.WriteString("\n")
	b.WriteString(markdown(res.Rows))
	b.WriteString("\n")
	for _, n := range res.Notes {
		b.WriteString(n + "\n")
	}
	b.WriteString("\n")
	b.WriteString(legend)
	return b.String()
}
