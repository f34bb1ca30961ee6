package gate

import "github.com/graygate/graygate/schemas/events"

// ErrorCounts returns what gate 5 counts in class k's statistics s: the
// attempts that count as errors (errorsOf: failures, answers past the
// censoring limit, late headers in observe streams) and the judged
// attempts. The simulator splits them second by second for its early
// looks (SPEC §9 rev. 4).
func (c Config) ErrorCounts(k Class, s *events.ArmStats) (errs, judgedN int64) {
	e := evaluator{c: c}
	return min(e.errorsOf(k, s), judged(s)), judged(s)
}

// WindowErrorsFail reports whether gate 5 fails on the window layer at
// look from gray's errs xg of ng judged attempts and primary's xp of np:
// what an early look (SPEC §9 rev. 4) decides, at the seconds' worth
// look.ErrorSeconds() spends.
func (c Config) WindowErrorsFail(xg, ng, xp, np int64, look Look) bool {
	e := evaluator{c: c, sp: c.windowSpend(look)}
	e.sp.failOnly = true // whether it fails is all it returns
	r := events.GateResult{Gate: events.GateGrayErrorRate, Threshold: c.Threshold(events.GateGrayErrorRate)}
	return e.difference(r, min(xg, ng), ng, min(xp, np), np, e.sp.errors, false).Verdict == events.VerdictFail
}
