package crashsim

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// A family is one kind of scenario: what it plans over the discovery run,
// what it does while a scenario plays, and what it checks at the end. Each
// lives in a file of its own, named after it, with the state its scenario
// keeps, and is listed once in simFamilies; the scenario loop asks the
// scenario's family, never its name. A family embeds baseFamily and
// overrides only the hooks it needs; docs/development.md says how one is
// added.
type family[U any] interface {
	// about names the family and says what it proves: the row of
	// docs/guarantees.md's table (a test keeps the two one fact).
	about() familyAbout
	// plan is the family's scenarios over the discovery run.
	plan(d *discovery[U]) []simScenario
	// sample is what the -short sample plays of the family's scenarios.
	sample(all []simScenario) []simScenario

	// setup readies a new scenario (the provider's faults, the family's
	// state); limit edits an effect the job is built with (the base has
	// cleared its rate and circuit); options are the job's options.
	setup(r *simRun[U])
	limit(r *simRun[U], fx *idemrt.Effect[U], spec idemrt.Effect[U])
	options(r *simRun[U]) []idem.Option
	// runContext is an incarnation's run context.
	runContext(r *simRun[U], ctx context.Context, inc *simInc) context.Context

	// At each hit: faultAt (under r.mu) is the error the statement or
	// point fails with; beforeCrash runs after the checks, before a
	// planned crash, and may fail the hit too; afterCrash runs once a
	// planned crash is passed, before a pause.
	faultAt(r *simRun[U], n int, h simHit) error
	beforeCrash(ctx context.Context, r *simRun[U], inc *simInc, h simHit) error
	afterCrash(ctx context.Context, r *simRun[U], inc *simInc, n int, h simHit)

	// beforePhase readies phase before it is served; playPhase plays it;
	// afterPhases runs once every phase is played, before convergence.
	beforePhase(r *simRun[U], phase int)
	playPhase(r *simRun[U], phase int)
	afterPhases(r *simRun[U])

	// Convergence: the clean runs the family may need (at least 3), the
	// clock's step between them, what comes before and after each, whether
	// every run is played (the plan counts attempts), and what follows.
	convergenceRuns(r *simRun[U]) int
	convergenceStep(r *simRun[U], step time.Duration) time.Duration
	beforeCleanRun(r *simRun[U])
	afterCleanRun(ctx context.Context, r *simRun[U])
	runsAll() bool
	afterConvergence(r *simRun[U])

	// What the oracle needs to know: whether two workers may run at once,
	// whether every provider call is predictable, the unit whose write
	// always fails (""), the unit whose write failed once with the
	// deliveries made then, what the caller hands in instead of the
	// fixture's phase (nil), and whether done rows are purged past
	// retention while the scenario plays.
	overlapping(sc simScenario) bool
	exactCalls(sc simScenario) bool
	brokenUnit() string
	failedWrite() (key string, deliveries int)
	handsIn(phase int) []U
	purgesPastRetention() bool
	// expect adjusts the oracle's end state (e.calls is nil when the
	// calls are not predicted).
	expect(r *simRun[U], e *simExpect[U])

	// End checks: rowViolation judges a ledger row before the common
	// judgement (a message ends it there); oneAttempt is a key whose row
	// must count exactly one attempt, and why; checkEnd runs the
	// family's own checks; checkAfterRerun runs after the re-run and
	// backfill.
	rowViolation(r *simRun[U], e idem.LedgerEntry) string
	oneAttempt(r *simRun[U]) (key, why string)
	checkEnd(ctx context.Context, r *simRun[U], exp simExpect[U])
	checkAfterRerun(ctx context.Context, r *simRun[U])
}

// familyAbout is a family's row of docs/guarantees.md's table.
type familyAbout struct {
	name       string
	guarantees []int  // as numbered in docs/guarantees.md
	what       string // what happens, and what is checked
	// long is about how long one of the family's scenarios takes on two
	// cores when it takes several times a crash scenario's (0.3 s): it
	// waits in real time (a hold, a cool-down, a paced call, a child
	// process) or plays many callers. The matrix starts the long ones
	// early, the longest first, so that the shorter scenarios fill the
	// cores around them instead of trailing them (longFirst).
	long time.Duration
}

// simFamilies is every family, in the order of docs/guarantees.md's
// table. A new family is added here and nowhere else in the loop.
func simFamilies[U any]() []family[U] {
	return []family[U]{
		&cleanFamily[U]{}, &crashFamily[U]{}, &crash2Family[U]{}, &subprocessFamily[U]{},
		&resplostFamily[U]{}, &failpreFamily[U]{}, &commitunknownFamily[U]{}, &writefailFamily[U]{},
		&stmtfailFamily[U]{}, &poisonFamily[U]{}, &failkFamily[U]{}, &permanentFamily[U]{},
		&stallFamily[U]{}, &pauseFamily[U]{}, &circuitFamily[U]{}, &fleetFamily[U]{},
		&recoverFamily[U]{}, &throttleFamily[U]{}, &stallTakeoverFamily[U]{}, &takeoverFamily[U]{},
		&liveleaseFamily[U]{}, &forgetFamily[U]{}, &leasedFamily[U]{}, &purgeYoungFamily[U]{},
		&purgeOldFamily[U]{}, &preemptFamily[U]{}, &doubleFamily[U]{}, &concurrentFamily[U]{},
		&rateFamily[U]{}, &burstFamily[U]{}, &heldFamily[U]{}, &heldRecordFamily[U]{},
		&fanoutFamily[U]{}, &fanoutCrashFamily[U]{}, &bumpFamily[U]{}, &mismatchFamily[U]{},
		&cancelFamily[U]{}, &skewFamily[U]{}, &purgePendingFamily[U]{}, &repeatBatchesFamily[U]{},
		&writeaheadFamily[U]{}, &poolFamily[U]{},
		&olderAloneFamily[U]{}, &writeaheadFailFamily[U]{}, &busyClaimFamily[U]{}, &purgeOlderFamily[U]{},
		&heldPurgeFamily[U]{},
	}
}

// familyNamed is a new value of the family named name, with its own
// state for one scenario; a name no family has (a subprocess child's
// scenario) gets the base behaviour.
func familyNamed[U any](name string) family[U] {
	for _, f := range simFamilies[U]() {
		if f.about().name == name {
			return f
		}
	}
	return &unlistedFamily[U]{name: name}
}

// unlistedFamily is a scenario outside the families (a subprocess child's).
type unlistedFamily[U any] struct {
	baseFamily[U]
	name string
}

func (f *unlistedFamily[U]) about() familyAbout { return familyAbout{name: f.name} }

// familyTable is docs/guarantees.md's table of the families.
func familyTable() string {
	var abouts []familyAbout
	for _, f := range simFamilies[struct{}]() {
		abouts = append(abouts, f.about())
	}
	return aboutTable(abouts)
}

// discovery is what a family plans over: the clean run's trace of hits
// and the provider calls it made.
type discovery[U any] struct {
	job   *Job[U]
	clean *simRun[U]
	trace []simHit
	full  bool // every crash site, not only those that leave new state
	// order is the provider's calls by key, in order; calls counts those
	// made before convergence; effectOf names each key's effect.
	order    []string
	calls    int
	effectOf map[string]string
	// firstPhase and secondPhase are the first hits of phases 1 and 2
	// (len(trace) when there is none); firstCall is each effect's first
	// effect.call.before hit in phase 0.
	firstPhase, secondPhase int
	firstCall               map[string]int
}

func newDiscovery[U any](job *Job[U], clean *simRun[U], trace []simHit, full bool) *discovery[U] {
	d := &discovery[U]{job: job, clean: clean, trace: trace, full: full, firstCall: map[string]int{}}
	clean.prov.mu.Lock()
	d.order = slices.Clone(clean.prov.order)
	d.effectOf = maps.Clone(clean.prov.effect)
	clean.prov.mu.Unlock()
	d.calls = min(len(d.order), callsBefore(trace))
	d.firstPhase = len(trace)
	if job.Source != SourceNoneName {
		if i := slices.IndexFunc(trace[1:], func(h simHit) bool { return h.p == idemtest.PointRunStart }); i >= 0 {
			d.firstPhase = i + 1
		}
	}
	d.secondPhase = len(trace)
	if job.Source != SourceNoneName && d.firstPhase+1 < len(trace) {
		if i := slices.IndexFunc(trace[d.firstPhase+1:], func(h simHit) bool { return h.p == idemtest.PointRunStart }); i >= 0 {
			d.secondPhase = d.firstPhase + 1 + i
		}
	}
	for k, h := range trace[:d.firstPhase] {
		if h.p == idemtest.PointEffectBeforeCall {
			if _, ok := d.firstCall[d.effectOf[h.detail]]; !ok {
				d.firstCall[d.effectOf[h.detail]] = k
			}
		}
	}
	return d
}

// at is a scenario of family that acts at hit k.
func at(family string, k int) simScenario {
	sc := newScenario(family)
	sc.at = k
	return sc
}

// firstCallOf is the number of effect's first provider call in the
// discovery run (-1: none).
// inTx reports whether the job holds a write transaction open at h.
func (d *discovery[U]) inTx(h simHit) bool { return simInTx(d.job, h) }

func (d *discovery[U]) firstCallOf(effect string) int {
	return slices.IndexFunc(d.order, func(k string) bool { return d.effectOf[k] == effect })
}

// sampleEvery is n of all, spread evenly (n <= 0: all of them).
func sampleEvery(all []simScenario, n int) []simScenario {
	if n <= 0 {
		return all
	}
	var out []simScenario
	step := max(1, len(all)/n)
	for i := 0; i < len(all); i += step {
		out = append(out, all[i])
		if n--; n == 0 {
			break
		}
	}
	return out
}

// baseFamily is every hook's default: a family that does nothing but
// play its scenarios' crashes, pauses and faults through the common loop.
type baseFamily[U any] struct{}

func (baseFamily[U]) plan(*discovery[U]) []simScenario                      { return nil }
func (baseFamily[U]) sample(all []simScenario) []simScenario                { return sampleEvery(all, 1) }
func (baseFamily[U]) setup(*simRun[U])                                      {}
func (baseFamily[U]) limit(*simRun[U], *idemrt.Effect[U], idemrt.Effect[U]) {}
func (baseFamily[U]) options(*simRun[U]) []idem.Option                      { return nil }
func (baseFamily[U]) runContext(_ *simRun[U], ctx context.Context, _ *simInc) context.Context {
	return ctx
}
func (baseFamily[U]) faultAt(*simRun[U], int, simHit) error { return nil }
func (baseFamily[U]) beforeCrash(context.Context, *simRun[U], *simInc, simHit) error {
	return nil
}
func (baseFamily[U]) afterCrash(context.Context, *simRun[U], *simInc, int, simHit) {}
func (baseFamily[U]) beforePhase(*simRun[U], int)                                  {}
func (baseFamily[U]) playPhase(r *simRun[U], phase int)                            { r.runPhase(phase, phasePlay{}) }
func (baseFamily[U]) afterPhases(*simRun[U])                                       {}
func (baseFamily[U]) convergenceRuns(*simRun[U]) int                               { return 0 }
func (baseFamily[U]) convergenceStep(_ *simRun[U], step time.Duration) time.Duration {
	return step
}
func (baseFamily[U]) beforeCleanRun(*simRun[U])                          {}
func (baseFamily[U]) afterCleanRun(context.Context, *simRun[U])          {}
func (baseFamily[U]) runsAll() bool                                      { return false }
func (baseFamily[U]) afterConvergence(*simRun[U])                        {}
func (baseFamily[U]) overlapping(simScenario) bool                       { return false }
func (baseFamily[U]) exactCalls(simScenario) bool                        { return false }
func (baseFamily[U]) brokenUnit() string                                 { return "" }
func (baseFamily[U]) failedWrite() (string, int)                         { return "", 0 }
func (baseFamily[U]) handsIn(int) []U                                    { return nil }
func (baseFamily[U]) purgesPastRetention() bool                          { return false }
func (baseFamily[U]) expect(*simRun[U], *simExpect[U])                   {}
func (baseFamily[U]) rowViolation(*simRun[U], idem.LedgerEntry) string   { return "" }
func (baseFamily[U]) oneAttempt(*simRun[U]) (string, string)             { return "", "" }
func (baseFamily[U]) checkEnd(context.Context, *simRun[U], simExpect[U]) {}
func (baseFamily[U]) checkAfterRerun(context.Context, *simRun[U])        {}
