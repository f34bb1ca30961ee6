package console

import (
	"slices"
	"time"

	"github.com/graygate/graygate/collector/internal/store"
	"github.com/graygate/graygate/schemas/events"
)

// armPool is one arm's replica pool as the gateways see it (SPEC §6.7):
// the replicas that serve out of those known, and the ones ejected.
type armPool struct {
	Arm     string
	Serving int
	Total   int
	// Ejected, Unhealthy and Draining name the replicas in that state in
	// at least one gateway's view.
	Ejected   []string
	Unhealthy []string
	Draining  []string
	Gateways  int
}

// stateRank orders replica states from serving to the least serving: a
// replica counts in its worst state over the gateways that see it.
var stateRank = map[events.ReplicaState]int{events.ReplicaHealthy: 0, events.ReplicaDraining: 1,
	events.ReplicaUnhealthy: 2, events.ReplicaEjected: 3}

// pools merges the gateways' views of one deployment into one armPool
// per arm (primary, then gray): a replica is one member whichever
// gateways list it, in the worst state any of them gives it.
func pools(views []store.ReplicaView) []armPool {
	type member struct {
		state events.ReplicaState
	}
	by := map[string]map[string]*member{}
	gws := map[string]map[string]bool{}
	for _, v := range views {
		for _, a := range v.Arms {
			arm := string(a.Arm)
			if by[arm] == nil {
				by[arm], gws[arm] = map[string]*member{}, map[string]bool{}
			}
			gws[arm][v.Gateway] = true
			for _, r := range a.Replicas {
				m := by[arm][r.Replica]
				if m == nil {
					by[arm][r.Replica] = &member{state: r.State}
					continue
				}
				if stateRank[r.State] > stateRank[m.state] {
					m.state = r.State
				}
			}
		}
	}
	var out []armPool
	for _, arm := range []string{string(events.ArmPrimary), string(events.ArmGray)} {
		ms := by[arm]
		if ms == nil {
			continue
		}
		p := armPool{Arm: arm, Total: len(ms), Gateways: len(gws[arm])}
		for name, m := range ms {
			switch m.state {
			case events.ReplicaHealthy:
				p.Serving++
			case events.ReplicaEjected:
				p.Ejected = append(p.Ejected, name)
			case events.ReplicaUnhealthy:
				p.Unhealthy = append(p.Unhealthy, name)
			case events.ReplicaDraining:
				p.Draining = append(p.Draining, name)
			}
		}
		slices.Sort(p.Ejected)
		slices.Sort(p.Unhealthy)
		slices.Sort(p.Draining)
		out = append(out, p)
	}
	return out
}

// replicaRow is one replica in one gateway's view, for the deployment
// page's table.
type replicaRow struct {
	Gateway string
	events.ReplicaStatus
	EjectedFor string // time left of an ejection, "" when not ejected
}

// armReplicas is an arm's replicas over every gateway's view.
type armReplicas struct {
	Arm     string
	Balance string
	Rows    []replicaRow
}

// replicaTables lays the views out per arm (primary, then gray), each
// gateway's replicas in its order.
func replicaTables(views []store.ReplicaView, now time.Time) []armReplicas {
	var out []armReplicas
	for _, arm := range []events.Arm{events.ArmPrimary, events.ArmGray} {
		t := armReplicas{Arm: string(arm)}
		for _, v := range views {
			for _, a := range v.Arms {
				if a.Arm != arm {
					continue
				}
				t.Balance = string(a.Balance)
				for _, r := range a.Replicas {
					row := replicaRow{Gateway: v.Gateway, ReplicaStatus: r}
					if r.EjectedUntil != nil && r.EjectedUntil.After(now) {
						row.EjectedFor = span(r.EjectedUntil.Sub(now))
					}
					t.Rows = append(t.Rows, row)
				}
			}
		}
		if len(t.Rows) > 0 {
			out = append(out, t)
		}
	}
	return out
}
