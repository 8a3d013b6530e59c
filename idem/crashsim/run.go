package crashsim

// The entry point: Run plays every family's scenarios for one job on one
// database kind.

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

func newSimRun[U any](t testing.TB, job *Job[U], db simDB, sc simScenario, env string) *simRun[U] {
	r := &simRun[U]{
		t: &simT{TB: t}, job: job, db: db, sc: sc, env: env,
		doneKeys: map[string]bool{}, seenAt: map[string]time.Time{}, late: map[string]bool{},
		prov:     newSimProvider(),
		window:   &windowSource[U]{units: map[string]U{}, keyOf: job.keyOf, markOf: job.MarkOf, served: map[int][]U{}, echo: map[string]*simEcho[U]{}, echoAlways: job.InsertOnce},
		cursor:   &cursorSource[U]{served: map[int][]U{}, echo: map[string]U{}},
		versions: baseVersions(job),
	}
	if sc.faults != nil {
		r.prov.faults = sc.faults
	}
	r.prov.now = r.now
	r.prov.progress = &r.progress
	r.phases = simPhases(job)
	r.incByID = map[int]*simInc{}
	r.effectErrs = map[int][]idemrt.EffectResult{}
	r.connWaits = map[int][]time.Time{}
	r.fam = familyNamed[U](sc.family)
	r.fam.setup(r)
	return r
}

// simSlots bounds how many scenarios play at once in this process; they
// wait mostly on the database (workers.go sets how many).
var simSlots = make(chan struct{}, simWorkers())

// Run runs every scenario family for one job on one database kind.
// Under -short it plays a deterministic sample; IDEMGEN_CRASHSIM_SCENARIO
// replays one scenario by name (family:NAME: every scenario of a family).
// It plays the job with its unit type erased (erase.go), so that the
// harness compiles once, here, and not once per job in every generated
// package's tests.
func Run[U any](t *testing.T, env Env, job *Job[U]) {
	runErased(t, env, eraseJob(job))
}

// runErased is not generic: the harness's code over units as any is
// compiled with this package, not in the generated one that calls Run.
func runErased(t *testing.T, env Env, job *Job[any]) { runJob(t, env, job) }

// runJob is Run on a job as the harness plays it: with its units as any.
func runJob[U any](t *testing.T, env Env, job *Job[U]) {
	if raw := os.Getenv(simChildEnv); raw != "" {
		simChild(t, env, job, raw)
		return
	}
	if job.Broker != "" {
		// The consumer families play beside the others, on the same
		// slots (so neither part's last scenarios trail alone), or alone
		// when the scenario to replay is one of theirs.
		if only := os.Getenv("IDEMGEN_CRASHSIM_SCENARIO"); only == famConsumer || strings.HasPrefix(only, famConsume) || strings.HasPrefix(only, "family:"+famConsume) {
			runConsumer(t, env, job)
			return
		}
		if simCold() {
			defer runConsumer(t, env, job) // after the others, as before
		} else {
			consumed := make(chan struct{})
			go func() {
				defer close(consumed)
				runConsumer(t, env, job)
			}()
			defer func() { <-consumed }() // on a Fatal too: nothing logs after the test ends
		}
	}
	start := time.Now()
	deathsBefore := simChildDeaths.Load()
	only := os.Getenv("IDEMGEN_CRASHSIM_SCENARIO")
	failFast := os.Getenv("IDEMGEN_CRASHSIM_FAILFAST") != ""
	var (
		mu        sync.Mutex
		failed    int
		scenarios int
		wg        sync.WaitGroup
		families  = map[string]int{}
		broken    = map[string]bool{}
	)
	verbose := simVerbose()
	play := func(sc simScenario) *simRun[U] {
		began := time.Now()
		r := newSimRun(t, job, env.fresh(t), sc, env.name())
		v, stalled, report := r.watched()
		if stalled {
			// Said at once on stderr too: go test shows a test's log only
			// when the test ends, and a human may be watching a stuck CI.
			fmt.Fprint(os.Stderr, report)
			r.db.abandon()
			mu.Lock()
			defer mu.Unlock()
			failed++
			broken[sc.family] = true
			head := strings.SplitAfterN(report, "\n", 4)
			t.Errorf("%s  (its goroutines and the database's view went to stderr when it stalled)", strings.Join(head[:min(3, len(head))], ""))
			return r
		}
		r.db.close()
		if verbose {
			t.Logf("%s: %d violations in %s", sc, len(v), time.Since(began).Round(time.Millisecond))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(v) > 0 {
			failed++
			broken[sc.family] = true
			if failed <= 5 {
				t.Errorf("crashsim %s %s: scenario %q broke invariants:\n  %s%s\nreplay: IDEMGEN_CRASHSIM_SCENARIO=%q go test -run '%s' .",
					job.Name, env.name(), sc, strings.Join(v, "\n  "), outOfSessionsHint(v), sc.String(), t.Name())
			}
		}
		return r
	}
	runOne := func(sc simScenario) {
		if only != "" && sc.String() != only && only != "family:"+sc.family {
			return
		}
		mu.Lock()
		stop := failFast && failed > 0
		if !stop {
			scenarios++
			families[sc.family]++
		}
		mu.Unlock()
		if stop {
			return
		}
		wg.Add(1)
		simSlots <- struct{}{}
		go func() {
			defer func() { <-simSlots; wg.Done() }()
			play(sc)
		}()
	}

	// Discovery: a clean run records the trace of points hit.
	var clean *simRun[U]
	if only == "" || only == famClean {
		scenarios++
		families[famClean]++
		clean = play(newScenario(famClean))
	} else {
		clean = newSimRun(t, job, env.fresh(t), newScenario(famClean), env.name())
		if _, stalled, report := clean.watched(); stalled {
			clean.db.abandon()
			t.Fatalf("%s", report)
		}
		clean.db.close()
	}
	if clean.t.stopped.Load() {
		t.Fatalf("crashsim %s %s: discovery stalled; no scenario can be planned", job.Name, env.name())
	}
	trace := slices.Clone(clean.trace[:clean.phaseHits])
	for _, p := range job.Points {
		if !slices.ContainsFunc(trace, func(h simHit) bool { return h.p == p }) {
			t.Errorf("crashsim %s %s: declared point %s never hit in discovery", job.Name, env.name(), p)
		}
	}
	if len(trace) == 0 {
		t.Fatalf("crashsim %s %s: discovery hit no points", job.Name, env.name())
	}
	full := os.Getenv("IDEMGEN_CRASHSIM_FULL") != ""
	plan := simPlan(job, clean, trace, full)
	if testing.Short() && only == "" && !full {
		plan = simSample[U](plan)
	}
	if !simCold() {
		plan = longFirst[U](plan)
	}
	for _, sc := range plan {
		runOne(sc)
	}
	wg.Wait()
	if only != "" && scenarios == 0 {
		t.Fatalf("no scenario named %q", only)
	}
	deaths := simChildDeaths.Load() - deathsBefore
	if only == "" && deaths == 0 {
		t.Errorf("crashsim %s %s: no subprocess child died at its point: subprocess mode is not exercised", job.Name, env.name())
	}
	var fams []string
	for _, f := range slices.Sorted(maps.Keys(families)) {
		fams = append(fams, fmt.Sprintf("%s=%d", f, families[f]))
	}
	if failed == 0 {
		t.Logf("crashsim %s %s: %d points, %d scenarios in %d families (%d real process deaths), all invariants held in %s\n  families: %s",
			job.Name, env.name(), len(trace), scenarios, len(families), deaths, time.Since(start).Round(time.Millisecond), strings.Join(fams, " "))
	} else {
		t.Errorf("crashsim %s %s: %d of %d scenarios broke invariants (families: %s)", job.Name, env.name(), failed, scenarios,
			strings.Join(slices.Sorted(maps.Keys(broken)), ", "))
	}
}

// simPlan enumerates every scenario of every family over the discovery
// trace. Without full, crash sites that leave the same state as a
// neighbouring one are left out (simCrashSites), and purge-old takes every
// third point.
func simPlan[U any](job *Job[U], clean *simRun[U], trace []simHit, full bool) []simScenario {
	d := newDiscovery(job, clean, trace, full)
	var plan []simScenario
	for _, f := range simFamilies[U]() {
		plan = append(plan, f.plan(d)...)
	}
	return plan
}

// longFirst orders plan so that the long families' scenarios (their
// about's long) start early, after a first wave of ordinary ones, then
// one in every three, the longest first; the others keep their plan's
// order. On two cores pgonly_service's PostgreSQL -short sample took 6.1
// to 7.0 s a job with held-record's 3 s scenario started late, when
// little was left to play beside it, and 3.6 to 5.1 s so. Not all of them
// at the start: played at once, a dozen circuit, burst and held-record
// scenarios slowed one another (circuit 4 to 5 s a scenario, from 1), and
// held-record's worker, under a bound of 150 ms in the rush of the first
// scenarios' new schemas, left an effect unapplied (bump_v2, sha256key:
// 4 runs of 9); after the first wave, 5 of 5 passed.
func longFirst[U any](plan []simScenario) []simScenario {
	long := map[string]time.Duration{}
	for _, f := range simFamilies[U]() {
		if a := f.about(); a.long > 0 {
			long[a.name] = a.long
		}
	}
	var longs, others []simScenario
	for _, sc := range plan {
		if long[sc.family] > 0 {
			longs = append(longs, sc)
		} else {
			others = append(others, sc)
		}
	}
	slices.SortStableFunc(longs, func(a, b simScenario) int { return cmp.Compare(long[b.family], long[a.family]) })
	// The first wave is ordinary: each of its scenarios creates its
	// schema (PostgreSQL) or file (SQLite), and the long families, held-record's
	// worker under a bound of 150 ms above all, are not played in that rush.
	first := min(cap(simSlots), len(others))
	ordered := append(make([]simScenario, 0, len(plan)), others[:first]...)
	others = others[first:]
	for len(longs) > 0 {
		ordered = append(ordered, longs[0])
		longs = longs[1:]
		n := min(2, len(others))
		ordered = append(ordered, others[:n]...)
		others = others[n:]
	}
	return append(ordered, others...)
}

// callsBefore counts the provider calls the discovery run made before
// convergence.
func callsBefore(trace []simHit) int {
	n := 0
	for _, h := range trace {
		if h.p == idemtest.PointEffectBeforeCall {
			n++
		}
	}
	return n
}

// simCrashSites are the hits worth crashing at. A crash leaves the durable
// state of the last COMMIT or statement outside a transaction, and the
// provider's state; the position inside a transaction does not matter (all
// of it rolls back). So every named point is a site, and so is every SQL
// boundary after a durable statement unless the worker's next hit is a
// named point (the same state). With full, every boundary before and after
// each COMMIT and each statement outside a transaction is a site too.
func simCrashSites(trace []simHit, full bool) []int {
	var sites []int
	named := func(k int) bool {
		return k < len(trace) && trace[k].p != pointSQLBefore && trace[k].p != pointSQLAfter
	}
	for k, h := range trace {
		durable := h.detail == "COMMIT" || strings.HasPrefix(h.detail, "auto ")
		switch h.p {
		case pointSQLBefore:
			prev := k > 0 && trace[k-1].p == pointSQLAfter && trace[k-1].inc == h.inc
			if full && (h.detail == "COMMIT" || (strings.HasPrefix(h.detail, "auto ") && !prev)) {
				sites = append(sites, k)
			}
		case pointSQLAfter:
			if durable && (full || !(named(k+1) && trace[k+1].inc == h.inc)) {
				sites = append(sites, k)
			}
		default:
			sites = append(sites, k)
		}
	}
	return sites
}

// distinctCrashSites are the crash sites (simCrashSites) less those that
// leave the same state as another: after a crash only the committed rows,
// the provider's calls and (a consumer's) the broker's messages remain,
// the incarnation's memory is gone, so two sites with nothing durable
// between them, no write committed, no statement outside a transaction
// other than a read, no provider call, no broker change and no other
// incarnation's hit, are one crash. Of each such run it keeps the last
// site inside a transaction (inTx: a crash whose session is killed with
// its locks held) and the last outside one. A batch's points inside its
// transaction are one crash, and so are an effect's record and the next
// effect's claim, or its call slot and its call: spec-space seed 38,
// spec 7's 227 sites are 130 distinct states. With full, every site is
// kept.
func distinctCrashSites(trace []simHit, full bool, inTx func(simHit) bool) []int {
	sites := simCrashSites(trace, full)
	if full {
		return sites
	}
	// state numbers each run of hits between two changes of state.
	state := make([]int, len(trace))
	n := 0
	for k, h := range trace {
		if simChangesState(h) || (k > 0 && (trace[k-1].inc != h.inc || trace[k-1].broker != h.broker)) {
			n++
		}
		state[k] = n
	}
	type crashState struct {
		state int
		inTx  bool
	}
	last := map[crashState]int{}
	for _, k := range sites {
		last[crashState{state[k], inTx(trace[k])}] = k
	}
	return slices.DeleteFunc(sites, func(k int) bool { return last[crashState{state[k], inTx(trace[k])}] != k })
}

// simChangesState reports whether a hit leaves what a crash after it
// leaves behind changed: a write committed, a statement outside a
// transaction that is not a read, or a provider call made.
func simChangesState(h simHit) bool {
	switch h.p {
	case pointSQLAfter:
		statement, auto := strings.CutPrefix(h.detail, "auto ")
		verb, _, _ := strings.Cut(statement, " ")
		return h.detail == "COMMIT" || (auto && !strings.EqualFold(verb, "SELECT"))
	case idemtest.PointEffectAfterCall:
		return true
	}
	return false
}

// simSample is the -short plan: every family, a few of each (its
// sample), chosen deterministically.
func simSample[U any](plan []simScenario) []simScenario {
	var out []simScenario
	for _, f := range simFamilies[U]() {
		name := f.about().name
		all := slices.DeleteFunc(slices.Clone(plan), func(sc simScenario) bool { return sc.family != name })
		if len(all) > 0 {
			out = append(out, f.sample(all)...)
		}
	}
	return out
}

// outOfSessionsHint says what to change when a violation came from the
// server refusing a session (SQLSTATE 53300, "too many clients"): the
// database was too small for the tests run at once, and the job is not
// at fault.
func outOfSessionsHint(violations []string) string {
	for _, v := range violations {
		if strings.Contains(v, "SQLSTATE 53300") {
			return fmt.Sprintf("\n(PostgreSQL refused a session: every test process playing a matrix holds up to about %d sessions. Run fewer at once (go test -p, %s) or raise max_connections.)",
				simSessionsPerProcess(), EnvWorkers)
		}
	}
	return ""
}
