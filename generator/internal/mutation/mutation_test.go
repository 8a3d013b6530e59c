// Package mutation proves the generated crash tests: it plants classic
// idempotency bugs into generated packages and the runtime, and requires
// each to be caught. It is a package of its own so its run has its own
// test timeout.
//
// The rule: every change to the engine lands with the crash family that
// reaches it and a mutant here that family kills, on both databases where
// the code differs.
package mutation

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A mutant plants one plausible idempotency bug into a generated package:
// in the runtime engine, in the dialect adapters' SQL or in the generated
// job code. Edits are exact: a mutant whose text no longer occurs fails the
// test, so the list cannot rot silently.
type mutant struct {
	name  string
	test  string // the generated crash test expected to kill it
	edits []mutantEdit
	db    string // the database it runs on: "sqlite" (default) or "postgres"
	// stall: the bug makes a scenario hang, not break an invariant; the
	// crash simulation's watchdog must fail it, with its report, within
	// stallBound (the test shortens the bound to make that quick).
	stall bool
	// realClock: the bug lives where only real clocks reach (a rate's
	// pacing: the crash simulation's clock stands still within a phase, so
	// it runs without rates; the River worker's groups, which run on a real
	// River); test is a hand-written test on real clocks, and its own
	// failure is the kill.
	realClock bool
}

// envMutation turns the mutation check on. It is off in the default
// go test ./..., whose every package shares one timeout: with 110 mutants
// the check alone takes longer, beside the goldens' crash tests, on two
// cores. .ci/run runs it in a step of its own.
const envMutation = "IDEMGEN_MUTATION"

// stallBound is the watchdog's bound for stall mutants.
const stallBound = 5 * time.Second

type mutantEdit struct {
	file string // relative to the target package's directory, or to the repository root for runtime files (idem/...)
	old  string // a regular expression that must match exactly once (or times times)
	new  string
	// times is how often old must match when not once: a PostgreSQL
	// query's single-unit and batch forms share their guards.
	times int
}

// mutantTarget is a generated package whose crash tests face mutants:
// together they cover every source kind (watermark, none, cursor), every
// write (upsert with newer_wins, insert_once, stage), keep_result,
// content-hash keys and a job without effects that writes ahead.
type mutantTarget struct {
	module  string // module root, relative to the repository root
	pkg     string // package directory, relative to module
	tests   []string
	mutants []mutant
}

const (
	// Files of the runtime package, relative to the repository root: a
	// mutant there is seen by every package that imports it.
	engineFile  = "idem/idemrt/engine.go"
	performFile = "idem/idemrt/perform.go"
	runFile     = "idem/idemrt/run.go"
	reportFile  = "idem/idemrt/report.go"
	batchFile   = "idem/idemrt/batch.go"
	effectsFile = "idem/idemrt/effects.go"
	pgFile      = "idem/idemrt/postgres.go"
	crashsimPG  = "idem/crashsim/pgsessions.go"
	keysFile    = "idem/idemrt/keys.go"
	dbclockFile = "idem/idemrt/dbclock.go"
	sqliteStore = "idem/idemsqlite/store.go"
	pgStore     = "idem/idempg/store.go"
	pgTxFile    = "idem/idempg/tx.go"
	limitsFile  = "idem/idemrt/limits.go"
	gateFile    = "idem/idemrt/gate.go"
	// The batch transaction's statements, and the staged writes.
	batchWriteFile = "idem/idemrt/batchwrite.go"
	stagedFile     = "idem/idemrt/staged.go"
	// The broker consumer, and the settlement it follows.
	consumeFile = "idem/idembroker/consume.go"
	settleFile  = "idem/idemrt/settle.go"
	// The River worker's groups.
	riverGroupFile = "idem/idemriver/group.go"
	// The RabbitMQ source.
	amqpFile = "idem/idemamqp/idemamqp.go"
	// The ledger's queries, which the runtime owns.
	sqliteLedger = "idem/idemsqlite/internal/ledgerdb/queries.sql.go"
	pgLedger     = "idem/idempg/internal/ledgerdb/queries.sql.go"
	// A package's own queries: its destinations'.
	sqliteSQL   = "internal/sqlitedb/queries.sql.go"
	pgSQL       = "internal/pgdb/queries.sql.go"
	syncTest    = "TestCrashSimInvoiceSync"
	hookTest    = "TestCrashSimPaymentWebhook"
	cursorTest  = "TestCrashSimEventImport"
	priceTest   = "TestCrashSimPriceSync"
	stageTest   = "TestCrashSimLedgerImport"
	pageTest    = "TestCrashSimPageImport"
	receiptTest = "TestCrashSimReceiptIntake"
	copyTest    = "TestCrashSimCopyJob"
	callTest    = "TestCrashSimCallJob"
	ackTest     = "TestCrashSimMessageAckJob"
	// testdata/golden/brokers: consumers of a broker (the consumer families)
	consumeTest     = "TestCrashSimSettlePayment"
	consumeDestTest = "TestCrashSimRefundOrder"
	rateTest        = "TestRateHoldsAcrossWorkers"                // example/limits_test.go, on real clocks
	steerTest       = "TestLimitOverrideIsFollowedByEveryWorker"  // example/steer_test.go, on real clocks
	liftTest        = "TestPauseByHandHoldsAnEffectWithoutLimits" // example/steer_test.go, on real clocks
	// example/river_group_test.go, on a real River
	riverOutcomesTest = "TestRiverGroupKeepsOutcomesPerJob"
	riverCrashTest    = "TestRiverGroupCrash"
	riverWaitTest     = "TestRiverGroupWaitIsBounded"
	// example/bench/writeahead_test.go, on PostgreSQL's real transactions
	writeAheadTest = "TestWriteAhead"
	// testdata/golden/insert_once_ahead and takeover_park
	csvTest       = "TestCrashSimCsvImport"
	signupTest    = "TestCrashSimSignupCopy"
	orderHookTest = "TestCrashSimOrderHookJob"
	// testdata/golden/adopted: the generated test of adopted tables that
	// do not fit (a test of its own, not a crash family: realClock)
	misfitTest = "TestAdoptedTablesRefuseMisfits"
	// idem/idemamqp's, on a real RabbitMQ.
	closeAcksTest = "TestCloseLandsItsAcks"
	// testdata/golden/spec_values: values at the edges of their range
	rateSyncTest   = "TestCrashSimRateSync"
	refundHookTest = "TestCrashSimRefundHookJob"
	bookingTest    = "TestCrashSimBookingSync"
	meterHookTest  = "TestCrashSimMeterHook"
)

// adoptedMutants face the adopted table's check (idemrt.CheckTables).
// Killed by the misfits test: the crash tests create the adopted table
// exactly as idemgen would, so a check that skipped a column passed them.
var adoptedMutants = []mutant{
	{name: "an adopted column NOT NULL where the job writes NULLs passes", test: misfitTest, realClock: true, edits: edit("idem/idemrt/adopted.go",
		`case want\.Nullable && c\.notNull:`, "case false && want.Nullable && c.notNull:")},
	{name: "an adopted column of another type passes", test: misfitTest, realClock: true, edits: edit("idem/idemrt/adopted.go",
		`case !sameColumnType\(dialect, c\.typ, want\.Type\):`, "case false && !sameColumnType(dialect, c.typ, want.Type):")},
}

// amqpMutants face the RabbitMQ source on a real broker (IDEMGEN_TEST_AMQP).
var amqpMutants = []mutant{
	{name: "a source closed without waiting for its consumer's cancel (its last acks dropped, their messages redelivered)", test: closeAcksTest, realClock: true,
		edits: edit(amqpFile, `go func\(\) \{ canceled <- s\.ch\.Cancel\(s\.tag, false\) \}\(\)`, "go func() { canceled <- nil }()")},
}

var targets = []mutantTarget{
	{module: ".", pkg: "example/billing", tests: []string{syncTest, hookTest}, mutants: exampleMutants},
	{module: "testdata", pkg: "golden/cursor", tests: []string{cursorTest}, mutants: cursorMutants},
	{module: "testdata", pkg: "golden/sha256key", tests: []string{priceTest}, mutants: priceMutants},
	{module: "testdata", pkg: "golden/staged", tests: []string{stageTest, pageTest, receiptTest}, mutants: stageMutants},
	{module: ".", pkg: "example/bench/benchjobs", tests: []string{copyTest, callTest}, mutants: benchMutants},
	{module: "testdata", pkg: "golden/none_nodest", tests: []string{ackTest}, mutants: ackMutants},
	{module: "testdata", pkg: "golden/brokers", tests: []string{consumeTest, consumeDestTest}, mutants: consumerMutants},
	{module: ".", pkg: "example", tests: []string{rateTest, steerTest, liftTest, riverOutcomesTest, riverCrashTest, riverWaitTest}, mutants: slices.Concat(rateMutants, riverMutants)},
	{module: ".", pkg: "example/bench", tests: []string{writeAheadTest}, mutants: writeAheadMutants},
	{module: "testdata", pkg: "golden/insert_once_ahead", tests: []string{csvTest, signupTest}, mutants: insertOnceAheadMutants},
	{module: "testdata", pkg: "golden/takeover_park", tests: []string{orderHookTest}, mutants: takeoverParkMutants},
	{module: "testdata", pkg: "golden/adopted", tests: []string{misfitTest}, mutants: adoptedMutants},
	{module: ".", pkg: "idem/idemamqp", tests: []string{closeAcksTest}, mutants: amqpMutants},
	{module: "testdata", pkg: "golden/spec_values", tests: []string{rateSyncTest, refundHookTest, bookingTest, meterHookTest}, mutants: specValuesMutants},
}

// specValuesMutants face testdata/golden/spec_values. Killed by rate on
// PostgreSQL: a rate of 2147483647/h spaces starts 1.676µs apart, which
// PostgreSQL's microseconds round down unless the next start is rounded up.
var specValuesMutants = []mutant{
	{name: "a rate's next start stored below its spacing", test: rateSyncTest, db: "postgres", edits: edit(limitsFile,
		`if t := next\.Truncate\(time\.Microsecond\); t\.Before\(next\) \{`, "if t := next.Truncate(time.Microsecond); false && t.Before(next) {")},
	// Killed by fleet (PostgreSQL): each engine adds its effect's limit
	// rows in one statement when it starts; one that frees the call slots
	// already there lets a second worker's engine take slots the first
	// worker's calls hold, more calls at once than the concurrency.
	{name: "adding an effect's limit rows again frees its held call slots", test: bookingTest, db: "postgres", edits: edit(pgLedger,
		`FROM unnest\(\$3::integer\[\]\) AS s\nON CONFLICT \(job, effect, slot\) DO NOTHING`,
		"FROM unnest($3::integer[]) AS s\nON CONFLICT (job, effect, slot) DO UPDATE SET owner = NULL, held_until = EXCLUDED.held_until WHERE idem_limits.slot >= 0")},
	// Killed by circuit, through the spec's own circuit (failures 3,
	// cool_down 30m beside a lease of 2m): the family's own circuit opens
	// at two failures, where this bug changes nothing.
	{name: "a circuit opens at two failures whatever the spec says", test: rateSyncTest, edits: edit("idem/idemrt/gate.go",
		`q\.FailGate\(ctx, t\.l\.job, t\.l\.effect, t\.l\.circuit\.Failures, now,`, "q.FailGate(ctx, t.l.job, t.l.effect, min(t.l.circuit.Failures, 2), now,")},
	// Killed by clean (any scenario): the crash simulation runs every
	// family under its own limits, so a job built without the spec's
	// concurrency (or rate, or circuit) passed the whole matrix until the
	// built job's declarations were held to the spec's (crashsim's
	// checkDeclared). The generated code is edited as an emitter's bug
	// would leave it.
	{name: "the built job drops an effect's concurrency", test: refundHookTest, edits: edit("idemgen_refund_hook.go",
		`\t\t\tConcurrency: 1,\n`, "")},
	// Killed by held-record (SQLite): a call slot's statement (TakeSlot,
	// a write that returns rows) waits for the write lock the forget
	// holds for SQLite's busy_timeout (10 s), not for its wait bound of
	// 150 ms, and succeeds once the hold ends.
	{name: "a SQLite write that returns rows waits past its bound", test: refundHookTest, edits: edit("idem/idemrt/sqlite.go",
		`return context\.WithTimeout\(ctx, WaitBound\(ctx\)\)`, "return ctx, func() {}")},
	// Killed by pool-held at-claim (SQLite), on rate_sync: post_rate's
	// circuit makes its every call read its gate, a row read outside a
	// transaction; the pool held from A's second claim of it, the read's
	// wait for a connection ends at its bound, and its error, handed to the
	// row as a cancelled context's cause, reads "context canceled": not
	// busy, so the release counts an attempt.
	{name: "a SQLite row read that waited out its bound for a connection fails as cancelled", test: rateSyncTest, edits: edit("idem/idemrt/sqlite.go",
		`return a\.DB\.QueryRowContext\(endedBy\{ctx, err\}, query, args\.\.\.\)`,
		"c, cancel := context.WithCancelCause(ctx); cancel(err); return a.DB.QueryRowContext(c, query, args...)")},
	// Killed by pool-held at-claim (SQLite), on rate_sync: the pool held
	// from A's claim of post_rate, every later call of the batch waits
	// out its bound for a connection again, two bounds each (with the
	// default bound, a minute an effect), where the engine gives them up
	// once one call has.
	{name: "a batch's calls each wait for a connection after one waited out its bound", test: rateSyncTest, edits: edit("idem/idemrt/effects.go",
		`dry\.CompareAndSwap\(nil, we\)`, "_ = we")},
	// Killed by pool-held slow-open (SQLite): every connection A opens
	// outlasts its bound; the embedded SQLite answers the open "sqlite3:
	// interrupted", not the context's deadline, and A's first statement
	// (the database clock's read) fails with it: not busy.
	{name: "a connection whose open outlasts the wait bound fails with the driver's words, not busy", test: rateSyncTest, edits: edit("idem/idemrt/waits.go",
		`\(bounded\.Err\(\) != nil \|\| errors\.Is\(err, context\.DeadlineExceeded\)\)`, "errors.Is(err, context.DeadlineExceeded)")},
	// Killed by held-record (SQLite), on booking_sync: the forget holds
	// the write lock when A's call of archive_booking ends, so the release
	// of its call slot (concurrency 1, lease 720h) fails busy; forgotten,
	// the slot stays held until the call's lease ends, A's next calls wait
	// for it, and A ends its run well after the forget still holding it.
	{name: "a call slot whose release failed is never released again", test: bookingTest, edits: edit(limitsFile,
		`l\.unfreed = append\(l\.unfreed, heldSlot\{slot, owner\}\)`, "_ = heldSlot{slot, owner}")},
	// Killed by purge-older, on meter_hook (a handed-in newer_wins job,
	// every effect with a retention): a key handed in again with other
	// data is a mismatch while its record lasts, so only a purge past
	// retention lets an older copy reach the write, whose guard must keep
	// the row's newer reading.
	{name: "a handed-in newer_wins upsert without its guard", test: meterHookTest, edits: edit(sqliteSQL,
		`WHERE excluded\.read_at >= d\.read_at AND `, "WHERE ")},
	// Killed by purge-older: the older copy, kept out of the row, decides
	// post_reading (when: always) on data the row does not hold.
	{name: "an older copy kept out of the row decides its effects", test: meterHookTest, edits: edit(batchWriteFile,
		`it\.outcome == OutcomeMismatch \|\| it\.older \}\)`, "it.outcome == OutcomeMismatch })")},
	// Killed by purge-older: the older copy's key record stays, so the
	// row's own version handed in after it is taken for a mismatch.
	{name: "an older copy kept out of the row leaves its key record", test: meterHookTest, edits: edit(batchWriteFile,
		`if _, err := q\.ForgetHandedIn\(ctx, e\.def\.Name, it\.key\); err != nil \{`,
		"if it.older { continue }; if _, err := q.ForgetHandedIn(ctx, e.def.Name, it.key); err != nil {")},
}

func edit(file, old, new string) []mutantEdit { return []mutantEdit{{file: file, old: old, new: new}} }

// twice edits both copies of a PostgreSQL query: the single-unit write
// and its batch form.
func twice(file, old, new string) []mutantEdit {
	return []mutantEdit{{file: file, old: old, new: new, times: 2}}
}

// benchMutants face the benchmark's copy_job: a job without effects,
// which writes ahead on PostgreSQL.
var benchMutants = []mutant{
	// Killed by rate (call_job's effect has one): two workers that read
	// the same pace both take its start once the compare-and-set is gone.
	{name: "the pacing row moved without its compare-and-set", test: callTest, edits: edit(sqliteLedger,
		`WHERE job = \?2 AND effect = \?3 AND slot = -1 AND held_until = \?4\n`,
		"WHERE job = ?2 AND effect = ?3 AND slot = -1 AND (held_until = ?4 OR ?4 IS NOT NULL)\n")},
	{name: "the pacing row moved without its compare-and-set (PostgreSQL)", test: callTest, db: "postgres", edits: edit(pgLedger,
		`WHERE job = \$2 AND effect = \$3 AND slot = -1 AND held_until = \$4\n`,
		"WHERE job = $2 AND effect = $3 AND slot = -1 AND (held_until = $4 OR $4::timestamptz IS NOT NULL)\n")},
	{name: "a batch written ahead drops its counts", test: copyTest, db: "postgres", edits: edit(batchFile,
		`\t\t<-done\n\t\trep\.add\(own\)\n`, "\t\t<-done\n")},
	// Killed by writeahead: a key's second write commits before its first.
	{name: "a batch written ahead does not wait for the batches in flight with its key", test: copyTest, db: "postgres", edits: edit(batchFile,
		`if ahead && writing\(rep, items\) \{`, "if ahead && false && writing(rep, items) {")},
	// Killed by writeahead's second phase, whose older version is two
	// batches back (the simulation's pool writes three ahead).
	{name: "a batch written ahead looks for its keys in the newest batch in flight only", test: copyTest, db: "postgres", edits: edit(batchFile,
		`for f := rep\.inFlight; f != nil; f = f\.before \{\n\t\tif slices`, "for f := rep.inFlight; f != nil; f = nil {\n\t\tif slices")},
	// Killed by writeahead-fail: a write fails while the batches around
	// it are in flight; without its mark the window's progress is saved
	// past it, and it is never written.
	{name: "a batch written ahead reports its failures without their marks", test: copyTest, db: "postgres", edits: edit(batchFile,
		`e\.writeAhead\(ctx, items, rep, own, collect, markOf, res\)`, "e.writeAhead(ctx, items, rep, own, collect, nil, res)")},
}

// insertOnceAheadMutants face insert_once jobs without effects, which
// write ahead on PostgreSQL: the first version written must stay.
var insertOnceAheadMutants = []mutant{
	// Killed by writeahead: the first version's write is held back before
	// it touches its row until the later batch waits or commits; one that
	// does not wait inserts the newer version first, and it stays.
	{name: "an insert_once batch written ahead does not wait for the batches in flight with its key", test: signupTest, db: "postgres", edits: edit(batchFile,
		`if ahead && writing\(rep, items\) \{`, "if ahead && false && writing(rep, items) {")},
	// Killed by commitunknown: with max_attempts 1 the unit is parked
	// though its row was written, skipped for good with that payload.
	{name: "a commit of unknown outcome counted as a failed attempt", test: signupTest, edits: edit(batchFile,
		`e\.unknownOutcome\(ctx, it\.u, it\.key, err, e\.unitLog\(it\)\)`, "e.failedOutcome(ctx, it.u, it.key, err, e.unitLog(it))")},
}

// takeoverParkMutants face a handed-in insert_once job whose key has a
// separator outside ASCII.
var takeoverParkMutants = []mutant{
	// Killed by clean: "·" is two bytes; escaping one of them leaves
	// ("ab·", "c") and ("ab", "·c") apart from the oracle's keys.
	{name: "a separator outside ASCII escaped byte by byte", test: orderHookTest, edits: edit(keysFile,
		`r, n := utf8\.DecodeRuneInString\(s\)`, "r, n := rune(s[0]), 1")},
}

// Killed by the bench's write-ahead test (realClock: it watches real
// transactions on PostgreSQL): a pool of three keeps two batch
// transactions open, no more.
var writeAheadMutants = []mutant{
	{name: "a batch written ahead opens one transaction more than the store allows", test: writeAheadTest, realClock: true, db: "postgres", edits: edit(batchFile,
		`rep\.keepInFlight\(e\.opt\.writeAheadDepth - 1\)`, "rep.keepInFlight(e.opt.writeAheadDepth)")},
	{name: "write-ahead's depth not bounded by the pool", test: writeAheadTest, realClock: true, db: "postgres", edits: edit("idem/idempg/store.go",
		`return min\(max\(int\(s\.pool\.Config\(\)\.MaxConns\)-1, 2\), maxConcurrentWrites\)`, "return maxConcurrentWrites")},
}

// Killed by the example's rate test on real clocks (realClock): two
// workers under one rate.
// Killed by the example's River group tests (example/river_group_test.go),
// on a real River over PostgreSQL: the grouped worker's outcomes must stay
// each job's own, and a crash at its commit must leave nothing reported
// written that was not.
var riverMutants = []mutant{
	{name: "a River group keeps its leases when it stops after its commit", test: riverCrashTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `if err := e\.ReleaseLeases\(release, leases\); err != nil`, "if err := e.ReleaseLeases(release, nil); err != nil")},
	{name: "a River group whose jobs all left after its commit keeps its leases", test: riverWaitTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `\t\tgiveBack\(ctx, e, leases\)\n\t\treturn\n`, "\t\treturn\n")},
	{name: "a River group performs its leased effects as if it had not leased them", test: riverOutcomesTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `e\.PerformLeased\(ctx, units, leases\)`, "e.PerformLeased(ctx, units, nil)")},
	{name: "PerformLeased takes every effect key as leased", test: riverCrashTest, realClock: true, db: "postgres",
		edits: edit("idem/idemrt/intx.go", `leaseUntil: leases\[key\]\}`, "leaseUntil: time.Now().Add(time.Hour)}")},
	{name: "a River job whose unit's write failed reported written", test: riverOutcomesTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `\t\t\talone = true\n\t\t\tagain = append\(again, m\)`, "\t\t\tm.settle(nil)")},
	{name: "a River group stopped before its commit reported written", test: riverCrashTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `return fail\(err\) // nothing is written: River retries`,
			"for _, m := range ms {\n\t\t\t\t\tm.settle(nil)\n\t\t\t\t}\n\t\t\t\treturn nil, nil")},
	{name: "a River group's last unit left out of its write", test: riverCrashTest, realClock: true, db: "postgres",
		edits: edit(riverGroupFile, `rep, leases, err := e\.ProcessPgTxLeased\(ctx, tx, units\)`, "rep, leases, err := e.ProcessPgTxLeased(ctx, tx, units[:len(units)-1])")},
}

var rateMutants = []mutant{
	{name: "a rate's start taken without waiting for it", test: rateTest, realClock: true, edits: edit(limitsFile,
		`return sleep\(ctx, start\.Sub\(now\)\)`, "return nil")},
	{name: "a rate's start taken by two workers at once", test: rateTest, realClock: true, db: "postgres", edits: edit(limitsFile,
		`if moved \{`, "if moved || true {")},
	// Steering by hand (ledger limit, ledger lift), on real clocks too.
	{name: "a rate set by hand never followed", test: steerTest, realClock: true, edits: edit(limitsFile,
		`if o != nil && o\.Rate\.N > 0 && o\.Rate\.Per > 0 \{`, "if false && o != nil {")},
	{name: "a lift leaves the rows waiting out the pause waiting", test: liftTest, realClock: true, edits: edit(gateFile,
		`err != nil \|\| !lifted \|\| !found \|\| g\.Until\.IsZero\(\) \{`, "err != nil || !lifted || !found || g.Until.IsZero() || true {")},
}

// Killed by repeat-batches (and the fixture's own mixed batches): a batch
// of handed-in keys that mixes new keys with old ones.
var ackMutants = []mutant{
	{name: "a batch stops recording its keys after its first new one", test: ackTest, edits: edit(sqliteStore,
		`FirstSeen: idemrt\.SQLiteTime\(now\)\}\)\n\t\tif err == nil \{\n\t\t\tcontinue`, "FirstSeen: idemrt.SQLiteTime(now)})\n\t\tif err == nil {\n\t\t\tbreak")},
	{name: "a batch with a new key takes every key as new", test: ackTest, db: "postgres", edits: edit(pgStore,
		`if err != nil \|\| len\(fresh\) == len\(unitKeys\) \{`, "if err != nil || len(fresh) > 0 {")}, {name: "a key repeated within a batch is written in the same round", test: ackTest, edits: edit(batchWriteFile,
		`n := seen\[it\.key\]\n`, "n := 0\n")},
}

// consumerMutants are the broker consumer's classic bugs; the consumer
// crash families (idem/crashsim/consume.go) must kill each.
var consumerMutants = []mutant{
	{name: "messages acknowledged when fetched, before their units commit", test: consumeDestTest, edits: edit(consumeFile,
		`\tstopKeepAlive := c\.keepAlive\(work, msgs\)\n`, "\tfor _, m := range msgs {\n\t\t_ = m.d.Ack(work)\n\t}\n\tstopKeepAlive := c.keepAlive(work, msgs)\n")},
	{name: "a message that can never succeed given back instead of settled dead (it loops)", test: consumeTest, edits: edit(consumeFile,
		`\tcase idemrt\.SettleDead:\n\t\tc\.dead\(ctx, m, ur\.Key, ur\.Err\)`, "\tcase idemrt.SettleDead:\n\t\tc.retry(ctx, m, time.Millisecond)")},
	{name: "a dead message settled without being parked", test: consumeTest, edits: edit(consumeFile,
		`if err := c\.e\.ParkMessage\(ctx, key, raw, cause\); err != nil \{`, "if err := error(nil); err != nil && raw.ID == \"\" {")},
	{name: "no drain: an owed effect acknowledged with its message is never performed", test: consumeTest, edits: edit(consumeFile,
		`\tstopDrain := c\.startDrain\(ctx\)\n`, "\tstopDrain := func() {}\n")},
	{name: "a unit that can never succeed (a mismatch, parked) acknowledged as applied", test: consumeDestTest, edits: edit(settleFile,
		`\t\treturn SettleDead\n`, "\t\treturn SettleDone\n")},
}

var cursorMutants = []mutant{
	{name: "cursor saved before its page is applied", test: cursorTest, edits: edit(runFile,
		`err = e\.apply\(ctx, units, rep, false, nil, &res\)\n`,
		"if advance {\n\t\t\t\t_ = saveCursor(e.st.Auto())\n\t\t\t}\n\t\t\terr = e.apply(ctx, units, rep, false, nil, &res)\n")},
	{name: "cursor moved back by a slower run", test: cursorTest, edits: edit(sqliteLedger,
		`WHERE excluded\.cursor_position > p\.cursor_position`, "")},
	{name: "insert_once without ON CONFLICT", test: cursorTest, edits: twice(sqliteSQL,
		`ON CONFLICT \(seq\) DO NOTHING\n`, "")},
	{name: "insert_once without ON CONFLICT (PostgreSQL)", test: cursorTest, db: "postgres", edits: twice(pgSQL,
		`ON CONFLICT \(seq\) DO NOTHING\n`, "")},
	{name: "cursor passes a page with a failed unit", test: cursorTest, edits: edit(runFile,
		`if err == nil && res\.failed == 0 && advance \{`, "if err == nil && advance {")},
	{name: "kept result never stored", test: cursorTest, edits: edit(performFile,
		`if !fx\.KeepResult \{`, "if true {")},
	{name: "attempts counter stuck after the first claim", test: cursorTest, edits: edit(sqliteLedger,
		`attempts = attempts \+ 1`, "attempts = min(attempts + 1, 1)")},
	// Killed by failk's first failure's wait (max_attempts 2: no row waited
	// after a second failure, and only those were measured).
	{name: "a backoff's jitter drawn below half the backoff", test: cursorTest, edits: edit("idem/idemrt/provider.go",
		`return time\.Duration\(float64\(d\) \* \(0\.5 \+ draw\(\)/2\)\)`, "return time.Duration(float64(d) * draw() / 4)")},
}

var priceMutants = []mutant{
	{name: "content hash without lengths", test: priceTest, edits: edit(keysFile,
		`binary\.BigEndian\.PutUint64\(n\[:\], uint64\(len\(p\)\)\)\n\t\th\.Write\(n\[:\]\)\n`, "_ = binary.BigEndian\n\t\t_ = n\n")},
	{name: "newer_wins on an int64 turned from >= into >", test: priceTest, edits: edit(sqliteSQL,
		`WHERE excluded\.rev >= d\.rev`, "WHERE excluded.rev > d.rev")},
	{name: "upsert without its version guard (PostgreSQL)", test: priceTest, db: "postgres", edits: twice(pgSQL,
		`WHERE excluded\.rev >= d\.rev AND `, "WHERE ")},
}

var stageMutants = []mutant{
	{name: "staged progress saved outside the window's transaction", test: stageTest, edits: edit(stagedFile,
		`if err := e\.saveMark\(ctx, q, w\.Until\); err != nil \{`, "if err := e.saveMark(ctx, e.st.Auto(), w.Until); err != nil {")},
	{name: "staged window committed page by page", test: stageTest, edits: edit(stagedFile,
		`\n\t\t\tfor chunk := range slices\.Chunk\(live, e\.opt\.batchSize\) \{\n\t\t\t\tif err := e\.writeBatch\(ctx, q, chunk, false\); err != nil \{`,
		"\n\t\t\tfor chunk := range slices.Chunk(live, 1) {\n\t\t\t\tif err := e.st.InTx(ctx, func(q Querier) error { return e.writeBatch(ctx, q, chunk, false) }); err != nil {")},
	// Killed by held: worker B's window transaction waits out its bound
	// before fetching a unit, and the run answers nothing at all.
	{name: "a staged window that failed before its first unit returns no error", test: stageTest, edits: edit(stagedFile,
		`if seen == 0 \{`, "if false {")},
	{name: "staged page's cursor saved outside its transaction", test: pageTest, edits: edit(stagedFile,
		`if err := save\(q\); err != nil \{`, "if err := save(e.st.Auto()); err != nil {")},
	// Killed by repeat-batches: a handed-in batch repeating a key with
	// other data is held back whole, call after call, instead of
	// answering that one unit as a mismatch.
	{name: "a staged batch with a mismatch is not published", test: receiptTest, edits: edit(stagedFile,
		`\t\t\tif err := e\.writeBatch\(ctx, q, chunk, false\); err != nil \{\n\t\t\t\treturn err\n\t\t\t\}\n`,
		"\t\t\tif err := e.writeBatch(ctx, q, chunk, false); err != nil {\n\t\t\t\treturn err\n\t\t\t}\n\t\t\tfor _, it := range chunk {\n\t\t\t\tif it.err != nil {\n\t\t\t\t\treturn \u0026unitFault[U]{it, it.err}\n\t\t\t\t}\n\t\t\t}\n")},
}

var exampleMutants = []mutant{
	// Killed by stmtfail (PostgreSQL): a plain insert that met a key
	// already there passes for one that wrote every row, so a batch's
	// units are reported inserted where they were unchanged, or fail with
	// the transaction the violation aborted.
	{name: "a transaction's prepared insert drops its error", test: syncTest, db: "postgres", edits: edit(pgStore,
		`\treturn p\.DBTX\.Exec\(ctx, sql, args\.\.\.\)\n`, "\ttag, _ := p.DBTX.Exec(ctx, sql, args...)\n\treturn tag, nil\n")},
	// Killed by held-record (PostgreSQL): a completion, one statement
	// pipelined behind its lock bound, waits without one on the row a
	// forget's transaction holds for as long as it holds it, then
	// succeeds: worker A never answers busy.
	{name: "a one-statement transaction without its lock bound", test: syncTest, db: "postgres", edits: edit("idem/idempg/bounded.go",
		`sendBehindLockBound\(ctx, c, false, bound, sql, args\)`, `sendBehindLockBound(ctx, c, false, 0, sql, args)`)},
	// Killed by crash, stmtfail and held-record (PostgreSQL): a
	// transaction's first statement, sent without the BEGIN that goes
	// with it, commits on its own, and a crash or a failed statement
	// before the COMMIT leaves it without the rest of its transaction.
	{name: "a transaction's first statement sent without its BEGIN", test: syncTest, db: "postgres", edits: edit(pgTxFile,
		`sendBehindLockBound\(ctx, t\.c, true, t\.bound, sql, args\)`, `sendBehindLockBound(ctx, t.c, false, t.bound, sql, args)`)},
	// Stopped by the watchdog in held (PostgreSQL): worker B's
	// transaction, whose first statement meets a row A's paused
	// transaction holds, waits as long as A holds it, not the job's
	// bound, and A waits for B.
	{name: "a transaction's first statement without its lock bound", test: hookTest, db: "postgres", stall: true, edits: edit(pgTxFile,
		`sendBehindLockBound\(ctx, t\.c, true, t\.bound, sql, args\)`, `sendBehindLockBound(ctx, t.c, true, 0, sql, args)`)},
	// Killed by held-record and held-purge (PostgreSQL): the statements
	// outside a transaction wait for a lock the default bound of 30 s, not
	// the job's: a record or a purge that meets a row a forget's
	// transaction holds waits as long as the forget holds it, then
	// succeeds.
	{name: "statements outside a transaction without the job's lock bound", test: syncTest, db: "postgres", edits: twice("idem/idempg/bounded.go",
		`bound := idemrt\.WaitBound\(ctx\)`, "bound := idemrt.DefaultWaitBound")},
	// Killed by held-purge: a purge waits for a connection or a lock the
	// default bound of 30 s, not the job's, so a row a forget holds keeps
	// it waiting as long as the forget holds it.
	{name: "a purge without the job's wait bound", test: syncTest, edits: edit(engineFile,
		`\tctx = withWaitBound\(ctx, e\.opt\.waitBound\)\n\tvar total int64\n`, "\tvar total int64\n")},
	// Killed by held (PostgreSQL): worker B's waits on A's row locks run
	// out of their bound, and each counts an attempt: failure records,
	// units parked, progress past them. (On SQLite the failure record is
	// a write that waits on the same lock, so nothing is recorded.)
	{name: "a wait past its bound counted as a failed attempt", test: hookTest, db: "postgres", edits: edit("idem/idemrt/parked.go",
		`if ctx\.Err\(\) != nil \|\| errors\.Is\(cause, ErrBusy\) \{`, "if ctx.Err() != nil {")},
	// Killed by held: B's wait for A's write lock ends as a raw "database
	// is locked", which a caller cannot tell from a broken database.
	{name: "SQLite's database-is-locked not answered as busy", test: hookTest, edits: edit("idem/idemrt/sqlite.go",
		`strings\.Contains\(err\.Error\(\), "database is locked"\)`, `strings.Contains(err.Error(), "database is locked") && false`)},
	// The effect's gate (idem/idemrt/gate.go). Killed by pause: the rows after
	// the paused call are called inside the pause, or count attempts.
	{name: "a pause ignored by the calls that did not get it", test: syncTest, edits: edit(gateFile,
		`\t\tif !g\.Shut\(now\) \{\n`, "\t\tif !g.Shut(now) || g.State == GatePaused {\n")},
	{name: "rows that meet a pause count an attempt", test: syncTest, edits: edit(gateFile,
		`return t, RetryAfter\(wait, gateShutError\(l\.effect, g\)\)`, "return t, gateShutError(l.effect, g)")},
	// Killed by circuit: the outage outlasts max_attempts, so a counted
	// probe or open failure parks a row, or counts past the threshold.
	{name: "a failed probe counts an attempt", test: syncTest, edits: edit(gateFile,
		`return RetryAfter\(until\.Sub\(now\), fmt\.Errorf\("the circuit's probe failed, not counted: %w", cause\)\)`, "return cause")},
	{name: "a failure that finds the circuit open counts an attempt", test: syncTest, edits: edit(gateFile,
		`return RetryAfter\(wait, fmt\.Errorf\("the effect's circuit is open, not counted: %w", cause\)\)`, "return cause")},
	// Killed by circuit: the outage reopens the circuit past the doubling
	// that reaches max_cool_down (twice the cool-down there); without the
	// ceiling the cool-down grows to 8 times, and an open circuit ends
	// further from the last failure than max_cool_down.
	{name: "the cool-down grows past max_cool_down", test: syncTest, edits: edit(gateFile,
		`\tif c\.MaxCoolDown > 0 \{\n`, "\tif false {\n")},
	// Killed by circuit: the runs after the phases call four at once and
	// the provider holds the probe while the others meet the gate; a call
	// that meets the probe in flight and goes ahead is a second probe.
	// (The phases' runs, one call at a time, never meet a probe in
	// flight.)
	{name: "a call that meets the probe in flight goes ahead", test: syncTest, edits: edit(gateFile,
		`return g\.State != GateClosed && g\.Until\.After\(now\)`, "return g.State != GateClosed && g.State != GateProbe && g.Until.After(now)")},
	// Killed by circuit: a call inside the cool-down (its probe taken
	// early) follows the failure that opened it at the same moment.
	{name: "the probe taken inside the cool-down", test: syncTest, edits: []mutantEdit{
		{file: gateFile, old: `\(g\.State == GateOpen \|\| g\.State == GateProbe\) && !g\.Until\.After\(now\)`, new: "(g.State == GateOpen || g.State == GateProbe)"},
		{file: sqliteLedger, old: `AND gate IN \('open', 'probe'\) AND held_until <= \?5`, new: "AND gate IN ('open', 'probe') AND ?5 IS NOT NULL"}}},
	{name: "the probe taken inside the cool-down (PostgreSQL)", test: syncTest, db: "postgres", edits: []mutantEdit{
		{file: gateFile, old: `\(g\.State == GateOpen \|\| g\.State == GateProbe\) && !g\.Until\.After\(now\)`, new: "(g.State == GateOpen || g.State == GateProbe)"},
		{file: pgLedger, old: `AND gate IN \('open', 'probe'\) AND held_until <= \$5`, new: "AND gate IN ('open', 'probe') AND $5::timestamptz IS NOT NULL"}}},
	// Killed by forget: a person forgets a key under a worker's live
	// lease (refused, nothing changed), and one done key at the end
	// (its row alone goes).
	{name: "forget does not refuse a key under a live lease", test: hookTest, edits: edit("idem/idemrt/recover.go",
		`if ShownEffectState\(e\.State, e\.LeaseUntil, now\) == StateLeased \{`, "if false {")},
	{name: "forget removes every effect key from the one named on", test: hookTest, edits: edit(sqliteLedger,
		`DELETE FROM idem_ledger\nWHERE effect_key = \?1 AND NOT`, "DELETE FROM idem_ledger\nWHERE effect_key >= ?1 AND NOT")},
	// Killed by permanent's replay of every handed-in unit: a handed-in
	// job's re-run hands in the last phase only, so the declined key was
	// never met again there.
	{name: "a ledger read loses the permanent flag", test: hookTest, edits: edit("idem/idemsqlite/store.go",
		`LastError: r\.LastError\.String, Permanent: r\.Permanent, ParkedReason: r\.ParkedReason\.String\}\n\tif r\.NextAttemptAt\.Valid`,
		"LastError: r.LastError.String, Permanent: false, ParkedReason: r.ParkedReason.String}\n\tif r.NextAttemptAt.Valid")},
	// Killed by failk's backoff check: each wait within [½, 1] of its
	// step, doubling to the spec's max.
	{name: "a backoff's jitter waits far less than the backoff", test: syncTest, edits: edit("idem/idemrt/provider.go",
		`return time\.Duration\(float64\(d\) \* \(0\.5 \+ draw\(\)/2\)\)`, "return time.Duration(float64(d) * draw() / 4)")},
	// Killed by circuit's read of the gate at the phases' end: the first
	// opening's gate was overwritten before any run after the phases read it.
	{name: "a circuit's first cool-down drawn past max_cool_down", test: syncTest, edits: edit(gateFile,
		`now, now\.Add\(t\.l\.circuit\.coolDown\(1, jitter\)\), cause\.Error\(\)\)`,
		"now, now.Add(t.l.circuit.ceiling()+t.l.circuit.coolDown(1, jitter)/4), cause.Error())")},
	// Killed by circuit's run just past max_cool_down, which must probe:
	// the gate's end was right, so its read passed.
	{name: "rows met by an open circuit wait twice its cool-down", test: syncTest, edits: slices.Concat(
		edit(gateFile, `return t, RetryAfter\(wait, gateShutError\(l\.effect, g\)\)`, "return t, RetryAfter(2*wait, gateShutError(l.effect, g))"),
		edit(gateFile, `return RetryAfter\(until\.Sub\(now\), fmt\.Errorf\("the circuit's probe failed`, "return RetryAfter(2*until.Sub(now), fmt.Errorf(\"the circuit's probe failed"),
		edit(gateFile, `\twait := until\.Sub\(now\)\n\t\tif state == GateProbe \{`, "\twait := 2 * until.Sub(now)\n\t\tif state == GateProbe {"))},
	// Killed by pool-held: a worker whose pool others hold ends within its
	// wait bound, as busy; before, no family held a connection, only locks.
	{name: "the database clock read on the pool without the wait bound", test: syncTest, edits: edit("idem/idemsqlite/store.go",
		`return dbNow\(ctx, idemrt\.SQLiteAuto\{DB: s\.db\}\)`, "return dbNow(ctx, s.db)")},
	{name: "the database clock read on the pool without the wait bound (PostgreSQL)", test: syncTest, db: "postgres", edits: edit("idem/idempg/store.go",
		`c, err := idemrt\.PgAcquire\(ctx, s\.pool\)\n\tif err != nil \{\n\t\treturn time\.Time\{\}, err\n\t\}\n\tdefer c\.Release\(\)\n\treturn dbNow\(ctx, c\)`,
		"return dbNow(ctx, s.pool)")},
	{name: "a read outside a transaction waits for a connection without a bound", test: syncTest, edits: edit("idem/idemrt/sqlite.go",
		`conn, err := boundedAcquire\(ctx, "the database handle's connections", a\.DB\.Conn\)\n\tif err != nil \{\n\t\treturn nil, err\n\t\}\n\tif _, err := sqliteEnsureBusyTimeout`,
		"conn, err := a.DB.Conn(ctx)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tif _, err := sqliteEnsureBusyTimeout")},
	{name: "a connection taken from the pool without the wait bound", test: syncTest, db: "postgres", edits: edit(pgFile,
		`return boundedAcquire\(ctx, fmt\.Sprintf\("the pool \(all %d in use\)", pool\.Config\(\)\.MaxConns\), pool\.Acquire\)`,
		"return pool.Acquire(ctx)")},
	{name: "a backoff stops doubling one failure early", test: syncTest, edits: edit("idem/idemrt/provider.go",
		`for i := int32\(1\); i < attempts && d < b\.Max; i\+\+ \{`, "for i := int32(2); i < attempts && d < b.Max; i++ {")},
	// Killed by burst: five callers on two connections, and a write
	// transaction that reads the database clock on a second connection
	// of its own pool waits for one that transactions blocked on its row
	// locks hold (the pool deadlock).
	{name: "the database clock read on the pool inside a write transaction", test: hookTest, db: "postgres", edits: edit(batchWriteFile,
		`at, clockErr = e\.leaseNow\(ctx, q\)`, "at, clockErr = e.leaseNow(ctx, nil)")},
	// The crash harness itself: a request lost between a worker and its
	// server session (the symptom of the old session hand-off) must make
	// the watchdog fail the scenario at once, never hang the test.
	{name: "a request to PostgreSQL lost on the wire", test: syncTest, db: "postgres", stall: true, edits: edit(crashsimPG,
		`inc\.conns = append\(inc\.conns, c\)\n\treturn c, nil\n\}`,
		"inc.conns = append(inc.conns, c)\n\treturn &simLossyConn{Conn: c}, nil\n}\n\n"+
			"type simLossyConn struct {\n\tnet.Conn\n\twrites int\n}\n\n"+
			"func (c *simLossyConn) Write(p []byte) (int, error) {\n\tif c.writes++; c.writes == 40 {\n\t\treturn len(p), nil\n\t}\n\treturn c.Conn.Write(p)\n}")},
	{name: "progress saved before the work", test: syncTest, edits: edit(engineFile,
		`return e\.runWindow\(ctx, w, true, fetch, markOf, rep\)`,
		"if err := e.st.Auto().SaveWatermark(ctx, e.def.Name, w.Until, e.def.Version, e.opt.now()); err != nil {\n\t\t\treturn err\n\t\t}\n\t\treturn e.runWindow(ctx, w, true, fetch, markOf, rep)")},
	{name: "ledger marked done before the provider call", test: syncTest, edits: edit(performFile,
		`result, callErr := e\.call\(ctx, fx, key, u\)`,
		"_, _ = e.st.Auto().CompleteMany(ctx, []string{key}, [][]byte{nil}, e.opt.owner, e.opt.now())\n\tresult, callErr := e.call(ctx, fx, key, u)")},
	{name: "a fresh idempotency key per attempt", test: syncTest, edits: edit(performFile,
		`result, callErr := e\.call\(ctx, fx, key, u\)`,
		`result, callErr := e.call(ctx, fx, key+"/"+e.opt.owner, u)`)},
	{name: "insert without ON CONFLICT", test: syncTest, edits: edit(sqliteSQL,
		`(?s)ON CONFLICT \(invoice_id\) DO UPDATE SET.*?RETURNING idemgen_write`, "RETURNING idemgen_write")},
	{name: "first insert without ON CONFLICT (SQLite)", test: syncTest, edits: edit(sqliteSQL,
		`ON CONFLICT \(invoice_id\) DO NOTHING`, "")},
	{name: "a row already there counted as inserted (SQLite)", test: syncTest, edits: edit("idemgen_sqlite.go",
		`InsertInvoiceSyncParams\(p\)\)\n\tif err != nil \{\n\t\treturn "", err\n\t\}\n\tif n == 1 \{`,
		"InsertInvoiceSyncParams(p))\n\tif err != nil {\n\t\treturn \"\", err\n\t}\n\tif n >= 0 {")},
	{name: "a batch's first insert without its savepoint (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgFile,
		`_, err = db\.Exec\(ctx, "ROLLBACK TO SAVEPOINT idemgen_insert_new"\)\n\t\treturn nil, err`, "return nil, nil")},
	// A batch after one that met a row already there skips the plain
	// insert's try; a skip taken for "written" leaves the batch unwritten.
	{name: "a batch after one that met a row counted as inserted, unwritten (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgFile,
		`if skipInsertNew\(ctx\) \{\n\t\treturn nil, nil\n\t\}`,
		"if skipInsertNew(ctx) {\n\t\tout := make([]Outcome, n)\n\t\tfor i := range out {\n\t\t\tout[i] = OutcomeInserted\n\t\t}\n\t\treturn out, nil\n\t}")},
	{name: "a batch's first insert skips keys already there (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgSQL,
		"AS updated_at, unnest\\(\\$7::text\\[\\]\\) AS idemgen_key\\) AS b\n`\n\ntype InsertInvoiceSyncBatchParams",
		"AS updated_at, unnest($7::text[]) AS idemgen_key) AS b\nON CONFLICT DO NOTHING\n`\n\ntype InsertInvoiceSyncBatchParams")},
	{name: "insert without ON CONFLICT (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgSQL,
		"ON CONFLICT \\(invoice_id\\) DO UPDATE SET[^`]*?RETURNING idemgen_key, idemgen_write", "RETURNING idemgen_key, idemgen_write")},
	// Killed by stmtfail (its rewrite scenario): the batch is halved down
	// to lone units, each written with its single-unit statement, which
	// PostgreSQL ran nowhere before lone units took it; a key written in
	// the first phase fails there on its unique constraint.
	{name: "a lone unit's upsert without ON CONFLICT (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgSQL,
		"ON CONFLICT \\(invoice_id\\) DO UPDATE SET[^`]*?RETURNING idemgen_write\n", "RETURNING idemgen_write\n")},
	// Killed by older-alone: an older copy served just after the newer
	// version goes in the key's later round alone, and with batches of
	// one in a batch alone: the single-unit statement's guard is all that
	// keeps the newer version.
	{name: "a lone unit's upsert without its version guard (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgSQL,
		`WHERE excluded\.updated_at >= d\.updated_at AND (\(\(d\.customer_id, [^\n]*\)\nRETURNING idemgen_write\n)`,
		"WHERE ((d.customer_id, d.amount_cents, d.created_at, d.updated_at) IS DISTINCT FROM (excluded.customer_id, excluded.amount_cents, "+
			"excluded.created_at, excluded.updated_at) OR excluded.idemgen_job_version > d.idemgen_job_version)\nRETURNING idemgen_write\n")},
	// Killed by the key-record check (purge-pending, and the purge after
	// convergence with a parked effect): the records of keys whose rows
	// are owed or parked go, and the answers stay right only because an
	// insert_once row that holds other data answers a mismatch anyway.
	// Killed by the key-record check (repeat-batches' [4 2'], a new key
	// and a changed repeat): the changed repeat is taken as new, its
	// insert_once row answers a mismatch anyway, and its key record, its
	// receipt's row still there, is forgotten.
	{name: "a batch with a new key takes its changed repeats as new (PostgreSQL)", test: hookTest, db: "postgres", edits: edit(pgStore,
		`\tfor _, k := range fresh \{\n\t\tdelete\(seen, k\)\n\t\}\n`,
		"\tisFresh := map[string]bool{}\n\tfor _, k := range fresh {\n\t\tisFresh[k] = true\n\t}\n\tfor i, k := range unitKeys {\n"+
			"\t\tif isFresh[k] || len(fresh) > 0 && string(seen[k]) != string(hashes[i]) {\n\t\t\tdelete(seen, k)\n\t\t}\n\t}\n")},
	{name: "key records purged while their ledger rows remain", test: hookTest, edits: edit(sqliteLedger,
		`\n    AND NOT EXISTS \(SELECT 1 FROM idem_ledger l WHERE l\.job = s\.job AND l\.unit_key = s\.unit_key\)\n`, "\n")},
	{name: "watermark set without GREATEST", test: syncTest, edits: edit(sqliteLedger,
		`watermark = coalesce\(max\(p\.watermark, excluded\.watermark\), excluded\.watermark\)`, "watermark = excluded.watermark")},
	{name: "watermark set without GREATEST (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`watermark = GREATEST\(p\.watermark, excluded\.watermark\)`, "watermark = excluded.watermark")},
	{name: "upsert without its version guard", test: syncTest, edits: edit(sqliteSQL,
		`WHERE excluded\.updated_at >= d\.updated_at AND `, "WHERE ")},
	{name: "upsert without its version guard (PostgreSQL)", test: syncTest, db: "postgres", edits: twice(pgSQL,
		`WHERE excluded\.updated_at >= d\.updated_at AND `, "WHERE ")},
	{name: "newer_wins turned from >= into >", test: syncTest, edits: edit(sqliteSQL,
		`WHERE excluded\.updated_at >= d\.updated_at AND `, "WHERE excluded.updated_at > d.updated_at AND ")},
	{name: "reservations outside the batch's transaction", test: syncTest, edits: []mutantEdit{
		// Reservations are collected during the write (leased or not) and inserted after the commit.
		{file: engineFile, old: `type Engine\[U any\] struct \{`, new: "type Engine[U any] struct {\n\towed []Reservations"},
		{file: batchWriteFile, old: `if err := q\.Reserve\(ctx, r, now\); err != nil \{`,
			new: "e.owed = append(e.owed, r)\n\t\tif err := error(nil); err != nil {"},
		{file: batchWriteFile, old: `leased, err := q\.ReserveLeased\(ctx, r, now, e\.opt\.owner, until\)`,
			new: "e.owed = append(e.owed, r)\n\t\tleased, err := map[string]bool{}, error(nil)"},
		{file: batchFile, old: `\t\tfor _, it := range items \{\n\t\t\te\.settle\(it, rep\)\n\t\t\}`,
			new: "\t\tfor _, r := range e.owed {\n\t\t\t_ = e.st.Auto().Reserve(ctx, r, e.opt.now())\n\t\t}\n\t\te.owed = nil\n\t\tfor _, it := range items {\n\t\t\te.settle(it, rep)\n\t\t}"}}},
	{name: "reservations committed on their own right after the batch's commit", test: syncTest, edits: []mutantEdit{
		// No named point lies between the two commits: only the SQL boundaries do.
		{file: engineFile, old: `type Engine\[U any\] struct \{`, new: "type Engine[U any] struct {\n\towed []Reservations"},
		{file: batchWriteFile, old: `if err := q\.Reserve\(ctx, r, now\); err != nil \{`,
			new: "e.owed = append(e.owed, r)\n\t\tif err := error(nil); err != nil {"},
		{file: batchWriteFile, old: `leased, err := q\.ReserveLeased\(ctx, r, now, e\.opt\.owner, until\)`,
			new: "e.owed = append(e.owed, r)\n\t\tleased, err := map[string]bool{}, error(nil)"},
		{file: batchFile, old: `err := e\.st\.InTx\(ctx, func\(q Querier\) error \{ return e\.writeBatch\(ctx, q, items, true\) \}\)\n`,
			new: "err := e.st.InTx(ctx, func(q Querier) error { return e.writeBatch(ctx, q, items, true) })\n\tfor _, r := range e.owed {\n\t\t_ = e.st.Auto().Reserve(ctx, r, e.opt.now())\n\t}\n\te.owed = nil\n"}}},
	{name: "a batch that fails drops the units after the one at fault", test: syncTest, edits: edit(batchFile,
		`e\.commit\(ctx, items, rep\) // the others, without it`, "// the others are dropped")},
	{name: "a batch that fails is halved but its second half dropped", test: syncTest, edits: edit(batchFile,
		`\t\te\.commit\(ctx, items\[half:\], rep\)\n`, "")},
	{name: "outcomes mis-assigned within a batch", test: syncTest, edits: edit(batchWriteFile,
		`\t\tit\.outcome = o\n`, "\t\tlast := items[len(items)-1]\n\t\tlast.outcome, it.outcome = o, last.outcome\n")},
	{name: "outcomes mis-assigned within a batch (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgFile,
		`if w, ok := written\[k\]; ok \{`, "if w, ok := written[keys[(i+1)%len(keys)]]; ok && k != \"\" {")},
	// Killed by repeat-batches' calls4: the batch [3 1] meets unit 1's
	// call still in flight (held until [3 1] claims its own), reads its
	// key pending and leased, fails to claim it and answers the repeat
	// busy, not deduped once the call has ended.
	{name: "a batch does not leave the keys of the calls in flight to them", test: hookTest, edits: edit(batchFile,
		`\t\tbusy = rep\.inFlight\.keys\n`, "\t\tbusy = nil\n")},
	{name: "a run ends before its last batch's effects are counted", test: hookTest, edits: edit(runFile,
		`\trep\.awaitInFlight\(\)\n\tif err == nil \{\n\t\terr = rep\.failed\.err`, "\tif err == nil {\n\t\terr = rep.failed.err")},
	{name: "the background recorder drops its last group", test: syncTest, edits: edit(effectsFile,
		`if !ok \{\n\t\t\t\tflush\(\)\n`, "if !ok {\n\t\t\t\tfor _, c := range pending {\n\t\t\t\t\tc.ok = true\n\t\t\t\t\tclose(c.done)\n\t\t\t\t}\n")},
	{name: "provider called without reading the ledger", test: syncTest, edits: edit(effectsFile,
		`case got\[c\.key\]:`, "case got[c.key] || true:")},
	{name: "lease without a fencing check", test: syncTest, edits: edit(performFile,
		`if now, err := e\.leaseNow\(ctx, nil\); err != nil \|\| !now\.Before\(leaseUntil\) \{`, "if false {")},
	{name: "claim steals a live lease", test: syncTest, edits: edit(sqliteLedger,
		`AND state = 'pending' AND \(lease_until IS NULL OR lease_until < \?5\)`, "AND state = 'pending'")},
	{name: "claim steals a live lease (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`AND state = 'pending' AND \(lease_until IS NULL OR lease_until < \$3\)`, "AND state = 'pending'")},
	{name: "completion without the lease owner's fence", test: syncTest, edits: edit(sqliteLedger,
		`WHERE effect_key = \?4 AND lease_owner = \?5 AND state = 'pending'`, "WHERE effect_key = ?4 AND state = 'pending' AND ?5 IS NOT NULL")},
	{name: "completion without the lease owner's fence (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`WHERE l\.effect_key = d\.effect_key AND l\.lease_owner = \$2 AND`, "WHERE l.effect_key = d.effect_key AND $2::text IS NOT NULL AND")},
	// Killed by leased (and livelease): a reservation leased to its
	// writer must carry the lease's end, or the next worker's claim takes
	// it while the writer calls; and it counts the attempt the claim
	// would have counted (leased checks it; failk parks one late).
	{name: "a reservation written leased without a lease expiry", test: syncTest, edits: edit(sqliteLedger,
		`'pending', 1, \?8, \?9, \?10, \?11\)`, "'pending', 1, ?8, CASE WHEN ?9 IS NULL THEN NULL END, ?10, ?11)")},
	{name: "a reservation written leased without a lease expiry (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`'pending', 1, \$8::text, \$9::timestamptz,`, "'pending', 1, $8::text, CASE WHEN $9::timestamptz IS NULL THEN $9::timestamptz END,")},
	{name: "a reservation written leased without counting its attempt", test: syncTest, edits: edit(sqliteLedger,
		`'pending', 1, \?8, \?9,`, "'pending', 0, ?8, ?9,")},
	{name: "a reservation written leased without counting its attempt (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`'pending', 1, \$8::text,`, "'pending', 0, $8::text,")},
	{name: "release without the lease owner's fence", test: syncTest, edits: edit(sqliteLedger,
		`WHERE effect_key = \?6 AND lease_owner = \?7\n`, "WHERE effect_key = ?6 AND ?7 IS NOT NULL\n")},
	{name: "attempts counter never incremented", test: syncTest, edits: edit(sqliteLedger,
		`attempts = attempts \+ 1`, "attempts = attempts")},
	{name: "effect parked one attempt early", test: syncTest, edits: edit(sqliteLedger,
		`WHEN attempts >= \?2 OR CAST`, "WHEN attempts + 1 >= ?2 OR CAST")},
	{name: "purge deletes pending ledger rows", test: syncTest, edits: edit(sqliteLedger,
		`AND p\.state = 'done' AND p\.done_at < \?3`, "AND (p.state = 'done' OR p.state = 'pending') AND coalesce(p.done_at, ?3) <= ?3")},
	{name: "purge deletes young ledger rows", test: syncTest, edits: edit(sqliteLedger,
		`AND p\.state = 'done' AND p\.done_at < \?3`, "AND p.state = 'done' AND ?3 IS NOT NULL")},
	{name: "watermark advances past a failed unit", test: syncTest, edits: edit(runFile,
		`!oldestFailed\.IsZero\(\) && oldestFailed\.Before\(mark\) \{`, "false && oldestFailed.Before(mark) {")},
	{name: "window ignores its overlap", test: syncTest, edits: edit(runFile,
		`since = p\.Watermark\.Add\(-overlap\)`, "since = p.Watermark")},
	{name: "an effect version bump owes nothing", test: syncTest, edits: edit(sqliteLedger,
		`AND unit_key = \?3 AND effect_version < \?4`, "AND unit_key = ?3 AND effect_version < ?4 AND 0")},
	{name: "same key, different payload silently deduped", test: hookTest, edits: edit(batchWriteFile,
		`case !bytes\.Equal\(prev, it\.hash\):`, "case false && !bytes.Equal(prev, it.hash):")},
	{name: "payload hash over only part of the unit", test: hookTest, edits: edit(batchFile,
		`sum := sha256\.Sum256\(p\)`, "sum := sha256.Sum256(p[:len(p)/2])")},
	{name: "effect key built from a non-identity field", test: hookTest, edits: edit("idemgen_payment_webhook.go",
		`return "receipt:v1:" \+ u\.EventID`, `return "receipt:v1:" + u.InvoiceID`)},
	{name: "a permanent failure retried like any other", test: syncTest, edits: edit(sqliteLedger,
		`OR CAST\(\?3 AS BOOLEAN\)`, "OR CAST(?3 AS BOOLEAN) AND 0")},
	{name: "a permanent failure's flag never stored", test: syncTest, edits: edit(sqliteLedger,
		`permanent = CAST\(\?3 AS BOOLEAN\),`, "permanent = false,")},
	{name: "a permanent failure's flag never stored (PostgreSQL)", test: syncTest, db: "postgres", edits: edit(pgLedger,
		`permanent = CAST\(\$3 AS boolean\),`, "permanent = false,")},
	{name: "a retried effect keeps its attempts", test: syncTest, edits: edit(sqliteLedger,
		`SET state = 'pending', attempts = 0, lease_owner = NULL,`, "SET state = 'pending', lease_owner = NULL,")},
	{name: "a retried effect keeps its attempts (PostgreSQL)", test: hookTest, db: "postgres", edits: edit(pgLedger,
		`SET state = 'pending', attempts = 0, lease_owner = NULL,`, "SET state = 'pending', lease_owner = NULL,")},
	{name: "retrying every parked effect finds none", test: hookTest, edits: edit(sqliteLedger,
		`WHERE job = \?1 AND state = 'failed' ORDER BY effect_key`, "WHERE job = ?1 AND state = 'parked' ORDER BY effect_key")},
	{name: "a held call slot taken again", test: syncTest, edits: []mutantEdit{
		{file: sqliteLedger, old: `\n        AND \(s\.owner IS NULL OR s\.held_until <= \?6\)`, new: ""},
		{file: sqliteLedger, old: `\n    AND \(idem_limits\.owner IS NULL OR idem_limits\.held_until <= \?6\)`, new: ""},
	}},
	// Killed by fleet on PostgreSQL, whose two workers' calls are held
	// long enough to overlap there too.
	{name: "a held call slot taken again (PostgreSQL)", test: syncTest, db: "postgres", edits: []mutantEdit{
		{file: pgLedger, old: `\n        AND \(s\.owner IS NULL OR s\.held_until <= \$6\)`, new: ""},
		{file: pgLedger, old: `\n    AND \(idem_limits\.owner IS NULL OR idem_limits\.held_until <= \$6\)`, new: ""},
	}},
	{name: "a provider's \"not now\" burns an attempt", test: syncTest, edits: edit(performFile,
		`NotCounted: \(notNow \|\| busy\) && !permanent,`, "NotCounted: busy && !permanent,")},
	{name: "a \"not now\" gives no attempt back", test: syncTest, edits: edit(sqliteLedger,
		`attempts = attempts - CASE WHEN CAST\(\?1 AS BOOLEAN\) THEN 1 ELSE 0 END,`, "attempts = attempts,")},
	{name: "a drain lists effects before their next attempt time", test: syncTest, edits: []mutantEdit{
		{file: sqliteLedger, old: `\n    AND \(next_attempt_at IS NULL OR next_attempt_at <= \?2\) AND effect_key > \?3`, new: " AND effect_key > ?3"},
		{file: sqliteLedger, old: `\n    AND \(next_attempt_at IS NULL OR next_attempt_at <= \?5\)\n`, new: "\n"},
	}},
	{name: "an effect's timeout never set on its call", test: syncTest, edits: edit(performFile,
		`if fx\.Timeout <= 0 \{`, "if true || fx.Timeout <= 0 {")},
	{name: "the provider's wait ignored: next attempt at once", test: syncTest, edits: edit(performFile,
		`\t\t\t\tbackoff = wait\n`, "\t\t\t\tbackoff = 0 * wait\n")},
	{name: "parked units hold the watermark", test: syncTest, edits: edit(batchFile,
		`if o := it\.result\.Outcome; o == OutcomeFailed \|\| o == OutcomeMismatch \{\n\t\t\tres\.failed\+\+`,
		"if o := it.result.Outcome; o == OutcomeFailed || o == OutcomeMismatch || o == OutcomeParked {\n\t\t\tres.failed++")},
	{name: "report counts an insert as an update", test: syncTest, edits: edit(reportFile,
		`case OutcomeInserted:\n\t\tr\.Inserted\+\+`, "case OutcomeInserted:\n\t\tr.Updated++")},
	// Killed by busy-claim: a wait past its bound between a claim and its
	// call counts an attempt, and parks an effect that was never called.
	{name: "a wait past its bound before the call counts an attempt", test: syncTest, edits: edit(performFile,
		`NotCounted: \(notNow \|\| busy\) && !permanent`, "NotCounted: notNow && !permanent")},
	// Killed by the cancel, skew and purge-pending families.
	{name: "a cancelled run still starts provider calls", test: syncTest, edits: edit(performFile,
		`if ctx\.Err\(\) != nil \{\n\t\treturn notCalled\(ctx, er, log\), nil\n\t\}\n\tresult, callErr`,
		"if false && ctx.Err() != nil {\n\t\treturn notCalled(ctx, er, log), nil\n\t}\n\tresult, callErr")},
	{name: "a call that ends after the cancel is not recorded", test: syncTest, edits: edit(effectsFile,
		`r\.write\(context\.WithoutCancel\(ctx\), keys, results\)`, "r.write(ctx, keys, results)")},
	{name: "leases judged on the worker's clock", test: syncTest, edits: edit(dbclockFile,
		`now = e\.opt\.hooks\.LeaseClock\(\)`, "now = e.opt.now()")},
	{name: "an update decides a when-inserted effect again", test: syncTest, edits: edit(batchWriteFile,
		`case fx\.When\.Matches\(decideAs\):`, "case fx.When.Matches(decideAs) || fx.When == WhenInserted && it.outcome == OutcomeUpdated:")},
	// Killed by stall-takeover: a call past its timeout is abandoned, its
	// lease given back while the provider still works on it.
	{name: "a call past its timeout is abandoned, not awaited", test: hookTest, edits: edit(performFile,
		`result, err := fx\.Call\(callCtx, key, u\)`,
		"type answer struct {\n\t\tb []byte\n\t\te error\n\t}\n\tch := make(chan answer, 1)\n\tgo func() { b, e := fx.Call(callCtx, key, u); ch <- answer{b, e} }()\n\tvar result []byte\n\tvar err error\n\tselect {\n\tcase a := <-ch:\n\t\tresult, err = a.b, a.e\n\tcase <-callCtx.Done():\n\t\terr = callCtx.Err()\n\t}")},
	// Killed by purge-pending: an insert_once key redelivered changed after
	// its records were purged must be a mismatch, not a new call.
	{name: "a replay after retention is not compared with its row", test: hookTest, edits: edit(batchWriteFile,
		`if e\.def\.Holds == nil \{`, "if true || e.def.Holds == nil {")},
	{name: "the replay comparison skips a field", test: hookTest, edits: edit(sqliteSQL,
		` AND d\.amount_cents = \?3`, "")},
	{name: "the replay comparison finds no row the same", test: hookTest, edits: edit(sqliteSQL,
		`SELECT count\(\*\) FROM payments AS d WHERE `, "SELECT count(*) FROM payments AS d WHERE false AND ")},
}

// deterministic families: a kill must come from one of these, not only
// from the seeded concurrent schedules.
var deterministic = []string{"clean", "crash", "crash2", "resplost", "failpre", "commitunknown", "preempt", "double",
	"mismatch", "subprocess", "writefail", "stmtfail", "poison", "failk", "permanent", "recover", "fleet", "throttle", "stall", "takeover", "livelease", "purge-young", "purge-old", "bump", "fanout",
	"cancel", "skew", "purge-pending", "repeat-batches", "writeahead", "stall-takeover", "leased", "burst", "forget", "rate", "held", "held-record", "pause", "circuit",
	"pool-held", "older-alone", "writeahead-fail", "busy-claim", "purge-older", "held-purge",
	"consume", "consume-crash", "consume-ackloss", "consume-reorder", "consume-inflight", "consume-takeover"}

// TestMutantsAreKilled proves the generated crash tests: each planted bug
// must fail them, through a deterministic family, while the unmutated
// package passes. It builds the example with `go test -overlay`, so the
// working tree is never touched. SQLite only, to keep it fast.
func TestMutantsAreKilled(t *testing.T) {
	if testing.Short() || os.Getenv(envMutation) == "" {
		t.Skip("builds and runs the generated crash tests once per mutant: " + envMutation + "=1 runs it (.ci/run does, in a step of its own)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	familyRE := regexp.MustCompile(`families: ([a-z0-9, -]+)\)`)

	pgURL := os.Getenv("IDEMGEN_TEST_POSTGRES")
	run := func(t *testing.T, tg mutantTarget, test, db string, short bool, overlay map[string]string, env ...string) (string, error) {
		// -vet=off: go vet ./... and the goldens' run vet these packages;
		// here vet would only cost each build a second or two.
		args := []string{"test", "-count=1", "-vet=off", "-timeout=20m", "-run", "^" + test + "$/^" + db + "$", "./" + tg.pkg}
		if short {
			args = append(args, "-short")
		}
		if overlay != nil {
			b, _ := json.Marshal(map[string]any{"Replace": overlay})
			f := filepath.Join(t.TempDir(), "overlay.json")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append([]string{"test", "-overlay", f}, args[1:]...)
		}
		cmd := exec.Command(goBin, args...)
		cmd.Dir = filepath.Join(root, tg.module)
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
			return strings.HasPrefix(e, "IDEMGEN_TEST_POSTGRES=")
		}), "GOFLAGS=-buildvcs=false")
		if db == "postgres" {
			cmd.Env = append(cmd.Env, "IDEMGEN_TEST_POSTGRES="+pgURL)
		}
		if overlay != nil {
			// One broken scenario is a kill; the rest need not run.
			cmd.Env = append(cmd.Env, "IDEMGEN_CRASHSIM_FAILFAST=1")
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	var (
		mu     sync.Mutex
		killed []string
		total  int
		// byShort counts the kills of the -short sample, the tier a
		// service runs on every push (docs/guarantees.md): each mutant runs
		// it first and the whole matrix only if it survives.
		byShort int
	)
	// The score, once every target's parallel subtests have ended.
	t.Cleanup(func() {
		slices.Sort(killed)
		// No mutant is listed as equivalent: each one changes what a provider,
		// a reader or an operator can observe, and a family shows it.
		t.Logf("mutation score %d/%d (the -short sample kills %d)\n  %s", len(killed), total, byShort, strings.Join(killed, "\n  "))
		if len(killed) != total {
			t.Errorf("mutation score %d/%d: every mutant must be killed", len(killed), total)
		}
	})
	for _, tg := range targets {
		dir := filepath.Join(root, tg.module, filepath.FromSlash(tg.pkg))
		t.Run(tg.pkg, func(t *testing.T) {
			// Targets play side by side too, so that a target's last
			// mutant never leaves a core idle until the next begins.
			t.Parallel()
			t.Run("unmutated", func(t *testing.T) {
				for _, test := range tg.tests {
					if out, err := run(t, tg, test, "sqlite", true, nil); err != nil {
						t.Fatalf("%s fails without any mutant:\n%s", test, out)
					}
				}
			})
			for _, m := range tg.mutants {
				db := cmp.Or(m.db, "sqlite")
				t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
					t.Parallel()
					if db == "postgres" && pgURL == "" {
						t.Skip("IDEMGEN_TEST_POSTGRES is not set: this mutant lives in the PostgreSQL SQL")
					}
					mu.Lock()
					total++
					mu.Unlock()
					contents, err := mutatedSources(root, dir, m)
					if err != nil {
						t.Fatal(err)
					}
					overlay := map[string]string{}
					for path, src := range contents {
						mutated := filepath.Join(t.TempDir(), filepath.Base(path))
						if err := os.WriteFile(mutated, src, 0o644); err != nil {
							t.Fatal(err)
						}
						overlay[path] = mutated
					}
					start := time.Now()
					if m.stall {
						// Stalls on every run: the -short sample shows it. The
						// time counts the build, so the bound is generous.
						out, err := run(t, tg, m.test, db, true, overlay, "IDEMGEN_CRASHSIM_STALL="+stallBound.String())
						took := time.Since(start)
						switch {
						case err == nil:
							t.Fatalf("mutant %q survived: %s passed", m.name, m.test)
						case !strings.Contains(out, "crashsim watchdog: ") || !strings.Contains(out, "made no progress for"):
							t.Fatalf("mutant %q was not caught by the watchdog:\n%s", m.name, tail(out))
						case !strings.Contains(out, "goroutines of this scenario:") || !strings.Contains(out, "the database's view:"):
							t.Fatalf("mutant %q: the watchdog's report lacks the scenario's goroutines or the database's view:\n%s", m.name, tail(out))
						case took > 3*time.Minute:
							t.Fatalf("mutant %q: the watchdog took %s", m.name, took.Round(time.Second))
						}
						mu.Lock()
						killed = append(killed, fmt.Sprintf("%s: %s: stopped by the watchdog (-short) in %s", tg.pkg, m.name, took.Round(time.Second)))
						byShort++
						mu.Unlock()
						return
					}
					// The -short sample is a subset of the whole matrix: a kill
					// there is a kill of the whole suite, found in seconds.
					out, err := run(t, tg, m.test, db, true, overlay)
					tier := "-short"
					if err == nil {
						tier = "whole matrix"
						out, err = run(t, tg, m.test, db, false, overlay)
					}
					if err == nil {
						t.Fatalf("mutant %q survived: %s passed", m.name, m.test)
					}
					if strings.Contains(out, "[build failed]") || strings.Contains(out, "vet:") {
						t.Fatalf("mutant %q does not compile:\n%s", m.name, out)
					}
					if m.realClock {
						if !strings.Contains(out, "--- FAIL: "+m.test) {
							t.Fatalf("mutant %q did not fail %s itself:\n%s", m.name, m.test, tail(out))
						}
						mu.Lock()
						killed = append(killed, fmt.Sprintf("%s: %s: killed by %s on real clocks (%s) in %s", tg.pkg, m.name, m.test, tier, time.Since(start).Round(time.Second)))
						byShort += b2i(tier == "-short")
						mu.Unlock()
						return
					}
					var fams []string
					for _, match := range familyRE.FindAllStringSubmatch(out, -1) {
						fams = append(fams, strings.Split(match[1], ", ")...)
					}
					if !slices.ContainsFunc(fams, func(f string) bool { return slices.Contains(deterministic, f) }) {
						t.Fatalf("mutant %q was not killed by a deterministic family (families: %v):\n%s", m.name, fams, tail(out))
					}
					slices.Sort(fams)
					mu.Lock()
					killed = append(killed, fmt.Sprintf("%s: %s: killed by %s (%s) in %s", tg.pkg, m.name, strings.Join(slices.Compact(fams), ", "), tier, time.Since(start).Round(time.Second)))
					byShort += b2i(tier == "-short")
					mu.Unlock()
				})
			}
		})
	}
}

// mutatedSources applies m's edits to the files they name (in the target
// package's directory dir, or under the repository's root for the
// runtime's idem/...) and returns the mutated contents by path. An anchor
// that does not match exactly as often as the edit says is an error: the
// mutant no longer applies.
func mutatedSources(root, dir string, m mutant) (map[string][]byte, error) {
	contents := map[string][]byte{}
	for _, e := range m.edits {
		path := filepath.Join(dir, filepath.FromSlash(e.file))
		if strings.HasPrefix(e.file, "idem/") {
			path = filepath.Join(root, filepath.FromSlash(e.file))
		}
		src, ok := contents[path]
		if !ok {
			var err error
			if src, err = os.ReadFile(path); err != nil {
				return nil, err
			}
		}
		re := regexp.MustCompile(e.old)
		if n := len(re.FindAllIndex(src, -1)); n != max(e.times, 1) {
			return nil, fmt.Errorf("mutant no longer applies: %q matches %d times in %s", e.old, n, e.file)
		}
		contents[path] = re.ReplaceAllLiteral(src, []byte(e.new))
	}
	return contents, nil
}

// TestMutantsApply checks, in every run and in milliseconds, what the
// mutation check (IDEMGEN_MUTATION=1) would find first: every mutant's
// anchors still match as often as they say, each mutated Go file still
// parses, and no two mutants of a package share a name. A refactor that
// moves a mutant's code fails here, not hours later in CI's mutation step.
func TestMutantsApply(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	n := 0
	for _, tg := range targets {
		dir := filepath.Join(root, tg.module, filepath.FromSlash(tg.pkg))
		names := map[string]bool{}
		for _, m := range tg.mutants {
			if names[m.name] {
				t.Errorf("%s: two mutants named %q", tg.pkg, m.name)
			}
			names[m.name] = true
			contents, err := mutatedSources(root, dir, m)
			if err != nil {
				t.Errorf("%s: %s: %v", tg.pkg, m.name, err)
				continue
			}
			for path, src := range contents {
				if strings.HasSuffix(path, ".go") {
					if _, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution); err != nil {
						t.Errorf("%s: %s: the mutated file does not parse: %v", tg.pkg, m.name, err)
					}
				}
			}
			n++
		}
	}
	t.Logf("%d mutants apply", n)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func tail(s string) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
