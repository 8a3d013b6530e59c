package crashsim

// The crash simulation that every generated package carries in its tests.
//
// A scenario runs a job through phases of source data on a fresh database,
// crashing, pausing or faulting it at chosen points: the engine's named
// crash points and every durable SQL statement boundary (sql.go).
// A crash parks the job goroutine for good (nothing unwinds, no deferred
// rollback runs) and kills its database sessions the way a dying process
// would; recovery starts a new incarnation from nothing. Invariants are
// checked at every point on committed state through a separate connection,
// and at the end against the oracle (oracle.go), which computes
// from the spec alone what the job must have done. The families are
// listed in simFamilies (family.go), each in a file of its own.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Points the harness adds around every SQL statement a crashing worker
// sends (sql.go); the detail says whether it is a COMMIT, a
// statement in a transaction ("tx ...") or one on its own ("auto ...").
const (
	pointSQLBefore idemtest.CrashPoint = "sql.before"
	pointSQLAfter  idemtest.CrashPoint = "sql.after"
)

// Store is what the harness needs from the generated Store.
type Store interface {
	Migrate(ctx context.Context) error
	Runtime() idem.Store
}

// Env is a database kind the simulation runs on.
type Env interface {
	name() string
	// fresh returns an empty, migrated database for one scenario.
	fresh(t testing.TB) simDB
	// attach opens the scenario database a parent process named (subprocess mode).
	attach(t testing.TB, locator string) simDB
}

// simDB is one scenario's database.
type simDB interface {
	// incarnation opens a new "process": new connections, nothing shared,
	// every statement reported to sqlHook. kill aborts its sessions as a
	// dying process would; close releases a finished incarnation.
	incarnation(t testing.TB, sqlHook idemtest.CrashHook) (st idem.Store, kill func(), close func())
	// diagnose describes the database's view of the scenario's sessions,
	// for a stalled scenario's report.
	diagnose(ctx context.Context) string
	// abandon gives up a stalled scenario's database: its sessions are
	// ended and it is never handed to another scenario.
	abandon()
	// observer reads committed state on its own connection.
	observer() idem.Store
	// keyRecords reads job's handed-in key records (the unit keys in the
	// seen table), on the observer's connection: no query of the store
	// lists them (keyrecords.go).
	keyRecords(ctx context.Context, table, job string) ([]string, error)
	// heldSlots lists job's call slots in the limits table that owner's
	// calls hold ("effect slot n"), on the observer's connection.
	heldSlots(ctx context.Context, table, job, owner string) ([]string, error)
	// ledgerStates reads the ledger table's keys, states and lease owners,
	// all that checkAt looks at, on the observer's connection, without the
	// lock bound each of the store's statements outside a transaction
	// sends first: Ledger reads every column, and after every commit that
	// was an eighth of a matrix's CPU.
	ledgerStates(ctx context.Context, table string) ([]idem.LedgerEntry, error)
	// close releases the scenario's database.
	close()
	// locator names the database for a child process.
	locator() string
}

// columnRows is what database/sql's rows and pgx's share.
type columnRows interface {
	Next() bool
	Scan(dest ...any) error
}

// scanColumn reads rows of one text column (simDB's keyRecords and
// heldSlots, on either database); the caller reads the rows' Err.
func scanColumn(rows columnRows) ([]string, error) {
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ledgerStatesPage is ledgerStates's statement on either database, with
// the key to read after and the page's size to fill in; the pages are
// read as idemrt.ReadWholeLedger reads Ledger's, through the primary
// key's index. On PostgreSQL the size is a parameter: a scan of the whole
// table read the dead rows that earlier scenarios left (49.6 blocks a
// read, not 13.4; so did a constant LIMIT), and took two and a half times
// longer. On SQLite it is a constant: a bound LIMIT made SQLite parse the
// kept statement again at each run (its value steers the plan, so a new
// binding expires the statement), 1.1 s of s007's matrix.
const ledgerStatesPage = "SELECT effect_key, state, coalesce(lease_owner, '') FROM %s WHERE effect_key > %s ORDER BY effect_key LIMIT %s"

// scanLedgerStates reads ledgerStatesPage's rows into entries with Key,
// State and LeaseOwner set; the caller reads the rows' Err.
func scanLedgerStates(rows columnRows) ([]idem.LedgerEntry, error) {
	var out []idem.LedgerEntry
	for rows.Next() {
		var e idem.LedgerEntry
		if err := rows.Scan(&e.Key, &e.State, &e.LeaseOwner); err != nil {
			return nil, err
		}
		e.State = idemrt.LedgerState(e.State)
		out = append(out, e)
	}
	return out, nil
}

// stopped reports whether a verb's error stopped the call, rather than
// listing units or effects that did not end applied (*idem.FailuresError).
func stopped(err error) bool {
	var fe *idem.FailuresError
	return err != nil && !errors.As(err, &fe)
}

// Verbs are one job value's verbs; nil where the job has none.
type Verbs[U any] struct {
	Run      func(ctx context.Context) (idem.Report, error)
	Process  func(ctx context.Context, units ...U) (idem.Report, error)
	Drain    func(ctx context.Context) (idem.Report, error)
	Backfill func(ctx context.Context, w idem.Window) (idem.Report, error)
	Purge    func(ctx context.Context) (int64, error)
	Stale    func(ctx context.Context, limit int) ([]string, error)
	// ConsumeFrom: a job with consume: runs as a consumer of a broker's
	// source (nil for the others).
	ConsumeFrom func(ctx context.Context, src idembroker.Source, opts ...idembroker.Option) error
}

// Effect is one effect as the spec declares it.
type Effect struct {
	Name        string
	When        idemrt.When
	Key         string // the key template, {version} and {job_version} unrendered
	Version     int32
	KeepResult  bool
	MaxAttempts int
	Retention   time.Duration
	Lease       time.Duration
	// Retry and Timeout are the spec's, when it sets them (zero: the
	// runtime's defaults).
	Retry   idemrt.Backoff
	Timeout time.Duration
	// Rate and Concurrency are the spec's bounds across workers (the
	// simulation runs without the rate: limits.go).
	Rate        idemrt.Rate
	Concurrency int32
	// Circuit is the spec's circuit. Each family runs with the circuit
	// its limit hook gives it: none, or the gate families' own (gate.go).
	Circuit idemrt.Circuit
}

// Job is what the generated test tells the harness about a job: the
// spec's declarations, the fixture, and how to build and read the job. It
// holds no generated key function: the oracle renders keys itself.
type Job[U any] struct {
	Name       string
	Source     string // watermark, cursor or none
	Version    int32
	Points     []idemtest.CrashPoint
	Key        string // the unit key template
	Fields     []Field
	InsertOnce bool
	HasDest    bool
	Stage      bool   // units and progress share one transaction per batch
	NewerWins  string // the newer_wins field, if any
	// UnitMaxAttempts parks a unit whose write failed this many times; 0 never.
	UnitMaxAttempts int
	Overlap         time.Duration
	Lease           time.Duration // the longest effect lease
	Effects         []Effect
	Unit            func(id, rev int) U
	MarkOf          func(U) time.Time
	SetMark         func(*U, time.Time)
	Rows            func(ctx context.Context, st idem.Store) ([]U, error)
	// Tables are the package's bookkeeping tables; a statement outside a
	// transaction on its limits table is not checked after (Job.changed).
	Tables idemrt.Tables
	NewJob func(st idem.Store, src any, fx *Provider, opts ...idem.Option) (Verbs[U], error)
	// Broker is the broker a handed-in job consumes from (consume:), ""
	// for none; the consumer families (consume.go) run when it is set.
	Broker string
	// Headers maps the unit fields a message carries in its headers to
	// the header names (consume: headers).
	Headers map[string]string

	// retype, on the erased job Run plays (erase.go), carries an edit of
	// the engine's job as the harness sees it over to the job as built.
	retype func(edit func(*idemrt.Job[any])) idem.Option
}

func (j *Job[U]) keyOf(u U) string { return oracleKey(j.Key, nil, u) }

// simChange is what committed state a statement may have changed, of what
// checkAt reads: the progress row, the ledger, the destination's rows.
type simChange uint8

const (
	changedProgress simChange = 1 << iota
	changedLedger
	changedRows
	changedAll = changedProgress | changedLedger | changedRows
)

// changed reports what a statement that has just run (its simStatements
// detail, and for a COMMIT the tables its transaction wrote) may have
// changed of what checkAt reads. A COMMIT changes what its transaction
// wrote; a statement outside a transaction, what it writes (all, when it
// is not plainly one table's write). A SELECT changes nothing, nor does a
// write to the limits table (call slots, pace, circuit gate), which no
// check reads: with rate and concurrency on, those came around every
// provider call, and each cost a check of three reads.
func (j *Job[U]) changed(detail string, wrote *simWrites) simChange {
	if detail == "COMMIT" {
		return j.writesChange(wrote)
	}
	stmt, auto := strings.CutPrefix(detail, "auto ")
	if !auto {
		return 0
	}
	w := &simWrites{any: true}
	if words := strings.Fields(stmt); len(words) > 0 {
		w = &simWrites{}
		w.note(words)
	}
	return j.writesChange(w)
}

// writesChange is what the writes w change of what checkAt reads (nil:
// unknown, all).
func (j *Job[U]) writesChange(w *simWrites) simChange {
	if w == nil || w.any {
		return changedAll
	}
	var c simChange
	for _, table := range w.tables {
		c |= j.tableChange(table)
	}
	return c
}

// tableChange is what a write to table changes of what checkAt reads.
func (j *Job[U]) tableChange(table string) simChange {
	switch {
	case j.Tables.Ledger == "":
		return changedAll // a package generated before Job had its tables
	case table == j.Tables.Ledger:
		return changedLedger
	case table == j.Tables.Progress:
		return changedProgress
	case table == j.Tables.Limits, table == j.Tables.Seen, table == j.Tables.Parked:
		return 0 // no check reads them
	}
	return changedRows
}

// Base is the fixture's time origin; whole seconds, so every database keeps it exactly.
var Base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ---- scenarios ----

// simScenario is one run of the fixture under a fault plan. at is the hit
// (the global number of a crash point or SQL boundary, in the order the
// discovery run met them) where the family acts; -1 for none.
type simScenario struct {
	family  string
	at      int
	crashAt []int            // hits to crash at, in order
	faults  map[int]simFault // provider faults by call number
	call    int              // a provider call whose key the family targets; -1 none
	// effect is the effect whose call call was in the discovery run: the
	// circuit family's outage is of that effect, from its first call at
	// or after call (a crash or concurrent calls may reorder the calls).
	effect  string
	times   int    // failk: how many times that key fails
	seed    uint64 // concurrent: two workers with seeded jitter at every point
	poison  int    // a unit id whose write fails every time; 0 none
	bump    int    // bump: effect index+1 bumped before phase 1; -1 the job's version
	variant string // takeover: "b-done"/"b-paused" and "late-ok"/"late-fails"
}

func newScenario(family string) simScenario { return simScenario{family: family, at: -1, call: -1} }

// String names the scenario; IDEMGEN_CRASHSIM_SCENARIO replays it.
func (s simScenario) String() string {
	parts := []string{s.family}
	if s.at >= 0 {
		parts = append(parts, fmt.Sprintf("at=%d", s.at))
	}
	if len(s.crashAt) > 0 {
		parts = append(parts, "crash@"+strings.Trim(fmt.Sprint(s.crashAt), "[]"))
	}
	for _, k := range slices.Sorted(maps.Keys(s.faults)) {
		parts = append(parts, fmt.Sprintf("fault%d@call%d", s.faults[k], k))
	}
	if s.call >= 0 {
		parts = append(parts, fmt.Sprintf("call=%d", s.call))
	}
	if s.times > 0 {
		parts = append(parts, fmt.Sprintf("times=%d", s.times))
	}
	if s.seed > 0 {
		parts = append(parts, fmt.Sprintf("seed=%d", s.seed))
	}
	if s.poison > 0 {
		parts = append(parts, fmt.Sprintf("unit=%d", s.poison))
	}
	if s.bump != 0 {
		parts = append(parts, fmt.Sprintf("bump=%d", s.bump))
	}
	if s.variant != "" {
		parts = append(parts, s.variant)
	}
	return strings.Join(parts, " ")
}

// simHit is one crash point or SQL boundary met by an incarnation.
type simHit struct {
	p      idemtest.CrashPoint
	detail string
	inc    int
	// broker counts the consumer broker's changes before the hit (a
	// delivery, a settlement): what a consumer's crash leaves behind
	// besides the database and the provider. 0 outside the consumer.
	broker int
}

// simInc is one incarnation: a "process" running one piece of work.
type simInc struct {
	id      int
	crashed chan struct{}
	paused  chan struct{}
	resume  chan struct{}
	// pauseAt says whether to pause at this hit; pausing happens once.
	pauseAt func(n int, h simHit) bool
	didStop bool
	// dead: the incarnation crashed. Its other goroutines (concurrent
	// effect calls, the recorder) park at their next hit, as they would
	// die with the process.
	dead atomic.Bool
	// writesAhead: its store keeps several batch transactions open at
	// once, so a job without effects writes ahead (PostgreSQL).
	writesAhead atomic.Bool
}

// simRun is the state of one scenario.
type simRun[U any] struct {
	t   *simT
	job *Job[U]
	db  simDB
	sc  simScenario
	env string

	mu          sync.Mutex
	checkMu     sync.Mutex
	progress    atomic.Int64 // hits and provider calls: the watchdog's pulse
	declared    atomic.Bool  // the built job's declarations are checked (limits.go)
	child       bool         // a subprocess-mode child: exit at the crash, check nothing
	hits        int
	phaseHits   int // hits before convergence: faults are planned only among these
	trace       []simHit
	violations  []string
	convergeErr error // the last convergence run's error: said beside end violations
	clock       time.Time
	lastMark    time.Time
	lastPos     int64
	doneKeys    map[string]bool
	// seenAt is when (on the scenario's clock) the checks first saw each
	// ledger row: it was reserved no later, so it is no older (purgeNow).
	seenAt map[string]time.Time
	// purgeRan: a purge has run (purgeNow); keys may be forgotten.
	purgeRan bool
	// forgotAtEnd: a family's end check purged past every retention
	// (purge-older), so the fixture handed in again is new work.
	forgotAtEnd bool
	incs        int
	versions    simVersions  // what the job is built with now
	pausedKey   string       // the effect key a paused worker holds
	pausedNow   atomic.Int32 // workers the scenario keeps paused now (limits.go)
	// changed says what committed state the checks read may have changed
	// since the last check: a COMMIT or a write outside a transaction ran
	// (Job.changed), or the world moved (all). What did not change is
	// judged as last read: seenProgress and seenLedger.
	changed simChange
	// Under checkMu: the last reads of the progress row and the ledger,
	// and whether each is good.
	seenProgress             idemrt.ProgressRow
	seenLedger               []idem.LedgerEntry
	progressSeen, ledgerSeen bool

	prov    *Provider
	window  *windowSource[U]
	cursor  *cursorSource[U]
	phases  [][]U            // the versions each phase serves or hands in
	history []simDelivery[U] // every version delivered, in order
	late    map[string]bool  // late arrivals: behind the mark when they appear
	// shifted: the phases moved later than phaseClock (phaseStart).
	shifted map[int]time.Duration
	// redeliver holds handed-in units whose write failed: the caller's
	// queue hands them in again with the next call.
	redeliver     []U
	runs          []simRunRecord // sequential runs, for the report counts
	parkedEffects int            // effects parked, as reported
	parkedUnits   int            // units parked or skipped as parked, as reported
	// converging: the phases are played; the clean runs after them go on.
	converging bool
	incByID    map[int]*simInc // every incarnation started, by id
	// effectErrs, under its own mutex: simEffectEnds. connWaits, under
	// the same, holds when each incarnation's calls ended having waited
	// out their bound for a pool connection.
	effectErrsMu sync.Mutex
	effectErrs   map[int][]idemrt.EffectResult
	connWaits    map[int][]time.Time
	// fam is the scenario's family, with its own state.
	fam family[U]
}

// simRunRecord is one sequential run's report and what it was served.
type simRunRecord struct {
	rep idem.Report
	inc int
}

func (r *simRun[U]) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

func (r *simRun[U]) setClock(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock = t
}

func (r *simRun[U]) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 20 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}
