package main

// The -history measurement (issue 22, item 1): cost that stays flat as data
// grows. One space is filled with N rows of history before anything is
// timed: N rows in each destination table (copy_rows, fx_rows), N ledger
// rows (half fx_job's announce, half call_job's call_provider, in the
// order a year wrote them: the older half done past the effects' 720h
// retention, then rows done within it, then the newest 5% pending and not
// claimable; 1% parked, spread over the year), and a key record for each
// of call_job's ledger rows. A second, empty space gets the same runs, side by side: copy_job
// and fx_job over -rows units, 1,000 single-unit Process calls of
// call_job (p99 latency), the backlog gauge and `idemgen status` (the
// runtime's idemops.DB.Status, in process, as the CLI runs it); then, on the
// history space only, Purge of the expired history in batches of 1,000
// (paced, as by default) while copy_job runs beside it.

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ncruces/go-sqlite3"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemsqlite"
	//idemgen:allow-testonly the benchmark sets its runs' limits on the spec's job (WithJobEdit)
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The targets of issue 22, item 1.
const (
	historyRateTarget    = 0.8 // copy_job and fx_job ≥ 0.8 × their empty-table rates
	historyP99Target     = 2.0 // a Process call's p99 ≤ 2 × empty
	historyReadTarget    = time.Second
	historyBesideTarget  = 0.7 // copy_job beside the purge ≥ 0.7 × its rate on the same tables with no purge
	historyBatchTarget   = time.Second
	historyProcessCalls  = 1000
	historyRetentionDays = 30 // both effects' retention is 720h (idemgen.yaml)
	historyFillBatch     = 100000
)

// historyMix is the state of history row i (1-based): the same rules
// fill the tables in SQL (fillHistory) and count what the fill and the
// purge must give. Rows alternate between fx_job (even i) and call_job
// (odd i), and lie in the order they were written, as in a table filled
// over a year: the first half done 31 to 365 days ago (past the effects'
// retention), then rows done 1 to 29 days ago, then the newest twentieth
// owed. 1% are parked, spread over the year: r = (i/2) % 100 is 5.
type historyMix struct {
	pending, leased, parked, expired, recent int
}

// historyState is row i's state among n, as historyMix counts it.
func historyState(i, n int) string {
	half, owedFrom := historyBounds(n)
	switch r := (i / 2) % 100; {
	case r == 5:
		return "parked"
	case i > owedFrom && r%5 < 2:
		return "leased" // pending under another worker's live lease
	case i > owedFrom:
		return "pending" // failed once, next attempt tomorrow
	case i <= half:
		return "expired"
	default:
		return "recent"
	}
}

// historyBounds are the last expired row and the last done row.
func historyBounds(n int) (half, owedFrom int) { return n / 2, n - n/20 }

func historyCounts(n int) (fx, call historyMix) {
	for i := 1; i <= n; i++ {
		m := &call
		if i%2 == 0 {
			m = &fx
		}
		switch historyState(i, n) {
		case "parked":
			m.parked++
		case "leased":
			m.leased++
		case "pending":
			m.pending++
		case "expired":
			m.expired++
		default:
			m.recent++
		}
	}
	return fx, call
}

func (m historyMix) owed() int { return m.pending + m.leased }
func (m historyMix) done() int { return m.expired + m.recent }

// doneCount is one effect's done rows as status read them (exact, or
// estimated from a sample on a large ledger) and as the fill and the
// measured runs made them.
type doneCount struct {
	effect          string
	status, want    int
	statusEstimated bool
	sample          int // the rows status sampled to estimate it
}

// doneTolerance is how far status's estimate of done rows may be from the
// truth with a sample of about idemops.DoneSampleRows rows of the ledger. A
// smaller sample (the tests' -status-sample) is allowed more, as a
// sample's error grows with 1/√rows: three times as much at a tenth.
const doneTolerance = 0.03

func (c doneCount) check() error {
	if !c.statusEstimated {
		return want("status: "+c.effect+" done", c.status, c.want)
	}
	tolerance := doneTolerance * math.Sqrt(max(float64(idemops.DoneSampleRows)/float64(max(c.sample, 1)), 1))
	if off := math.Abs(float64(c.status-c.want)) / float64(c.want); off > tolerance {
		return fmt.Errorf("status: %s done estimated %d, %.1f%% off the %d done (a sample of %d rows may be %.1f%% off)", c.effect, c.status, 100*off, c.want, c.sample, 100*tolerance)
	}
	return nil
}

// historySide is one side of the comparison: empty tables or history.
type historySide struct {
	copyJob, fxJob      result
	processP50, process time.Duration // single-unit Process latency: median and p99
	backlog             time.Duration // the slowest of the backlog gauge's reads (both jobs, 3 times each)
	status              time.Duration // idemops.DB.Status, the slowest of 3
}

// historyResult is the whole -history measurement.
type historyResult struct {
	n                  int
	fill               time.Duration
	empty, history     historySide
	purged             int64 // rows Purge deleted (ledger and key records)
	purgedLedger       int   // of them, ledger rows
	purge              time.Duration
	purgeBatches       int           // DELETE statements Purge ran
	purgeMaxBatch      time.Duration // the longest of them
	purgeSlowest       string        // its query's name
	purgeOverSecond    int           // batches that took a second or more
	beside             result        // copy_job while the purge ran
	besideOverlap      bool          // the purge was still running when copy_job ended
	statusOwed, parked int           // what status and the gauge counted on the history side
	statusDone         []doneCount   // what status counted done, per effect, on the history side
	kept               string        // -history-keep: the history's schema or file, left in place
}

func (h *historyResult) targets() []target {
	return []target{
		{label: "history/copyjob", value: ratio(h.history.copyJob.rate(), h.empty.copyJob.rate()), bound: historyRateTarget, applies: true},
		{label: "history/fxjob", value: ratio(h.history.fxJob.rate(), h.empty.fxJob.rate()), bound: historyRateTarget, applies: true},
		{label: "history/p99", value: ratio(h.history.process.Seconds(), h.empty.process.Seconds()), bound: historyP99Target, atMost: true, applies: true},
		{label: "history/backlog_s", value: h.history.backlog.Seconds(), bound: historyReadTarget.Seconds(), atMost: true, applies: true},
		{label: "history/status_s", value: h.history.status.Seconds(), bound: historyReadTarget.Seconds(), atMost: true, applies: true},
		{label: "history/purge_batch_s", value: h.purgeMaxBatch.Seconds(), bound: historyBatchTarget.Seconds(), atMost: true, applies: true},
		// What the purge costs a job beside it: the same job on the same
		// tables, without the purge (what the history costs it is
		// history/copyjob).
		{label: "history/beside", value: ratio(h.beside.rate(), h.history.copyJob.rate()), bound: historyBesideTarget, applies: true},
	}
}

func (h *historyResult) print(out io.Writer) {
	fmt.Fprintf(out, "\nhistory: %d rows in each of copy_rows, fx_rows and the ledger, %d key records (filled in %v), against empty tables\n",
		h.n, (h.n+1)/2, h.fill.Round(time.Millisecond))
	const row = "  %-28s %14s %14s   %-32s %s\n"
	fmt.Fprintf(out, row, "", "empty", "history", "figure", "target")
	ts := h.targets()
	fig := func(t target) string { return fmt.Sprintf("%s=%s", t.label, formatRatio(t.value)) }
	rate := func(r result) string { return fmt.Sprintf("%.0f/s", r.rate()) }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(out, row, "copy_job units/s", rate(h.empty.copyJob), rate(h.history.copyJob), fig(ts[0]), ts[0])
	fmt.Fprintf(out, row, "fx_job units/s", rate(h.empty.fxJob), rate(h.history.fxJob), fig(ts[1]), ts[1])
	fmt.Fprintf(out, row, fmt.Sprintf("Process p99 (%d calls)", historyProcessCalls), ms(h.empty.process), ms(h.history.process), fig(ts[2]), ts[2])
	fmt.Fprintf(out, row, "Process p50", ms(h.empty.processP50), ms(h.history.processP50), "", "")
	fmt.Fprintf(out, row, "backlog gauge (slowest)", ms(h.empty.backlog), ms(h.history.backlog), fig(ts[3]), ts[3])
	fmt.Fprintf(out, row, "idemgen status (slowest)", ms(h.empty.status), ms(h.history.status), fig(ts[4]), ts[4])
	fmt.Fprintf(out, "  purge: %d rows (%d ledger, %d key records) in %v = %.0f rows/s, %d batches, longest %s (%s), %d of 1 s or more   %s  target %s\n",
		h.purged, h.purgedLedger, int(h.purged)-h.purgedLedger, h.purge.Round(time.Millisecond), float64(h.purged)/h.purge.Seconds(),
		h.purgeBatches, ms(h.purgeMaxBatch), h.purgeSlowest, h.purgeOverSecond, fig(ts[5]), ts[5])
	overlap := "the purge ran throughout"
	if !h.besideOverlap {
		overlap = "the purge ended first"
	}
	fmt.Fprintf(out, "  copy_job beside the purge: %d units in %v = %s (%s; %.2f × empty)   %s  target %s\n",
		h.beside.units, h.beside.elapsed.Round(time.Millisecond), rate(h.beside), overlap, ratio(h.beside.rate(), h.empty.copyJob.rate()), fig(ts[6]), ts[6])
	fmt.Fprintf(out, "  status and the gauge on history: %d owed, %d parked effects (as filled)", h.statusOwed, h.parked)
	for _, c := range h.statusDone {
		how := "counted"
		if c.statusEstimated {
			how = "estimated"
		}
		fmt.Fprintf(out, "; %s done %s %d of %d", c.effect, how, c.status, c.want)
	}
	fmt.Fprintln(out)
	if h.kept != "" {
		fmt.Fprintf(out, "  kept (-history-keep): %s\n", h.kept)
	}
	fmt.Fprintln(out, "  idemgen status is idemops.DB.Status run in this process, as the CLI runs it; the gauge is the backlog read the engine hands its observer (idemotel's idemgen.backlog)")
}

// statementTimer times the DELETE statements of a space's connections
// (pgx's tracer on PostgreSQL, SQLite's profile trace): each of Purge's
// batches is one autocommit statement, so this is its transaction's time.
type statementTimer struct {
	mu    sync.Mutex
	timed deleteTimes
}

// deleteTimes is what the timer saw: how many DELETE statements, the
// longest (and sqlc's name of it), and how many took a second or more.
type deleteTimes struct {
	deletes, overSecond int
	longest             time.Duration
	longestName         string
}

func (t *statementTimer) record(sql string, took time.Duration) {
	if !strings.HasPrefix(strings.ToUpper(strings.TrimSpace(stripComments(sql))), "DELETE") {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timed.deletes++
	if took >= time.Second {
		t.timed.overSecond++
	}
	if took > t.timed.longest {
		t.timed.longest, t.timed.longestName = took, queryName(sql)
	}
}

func (t *statementTimer) reset() deleteTimes {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.timed
	t.timed = deleteTimes{}
	return d
}

// queryName is sqlc's name of a query ("-- name: PurgeSeen :execrows"),
// or its first words.
func queryName(sql string) string {
	sql = strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	f := strings.Fields(sql)
	return strings.Join(f[:min(3, len(f))], " ")
}

// stripComments drops sqlc's leading "-- name: ..." line.
func stripComments(sql string) string {
	for {
		sql = strings.TrimSpace(sql)
		if !strings.HasPrefix(sql, "--") {
			return sql
		}
		i := strings.IndexByte(sql, '\n')
		if i < 0 {
			return ""
		}
		sql = sql[i+1:]
	}
}

type traceStart struct{}

type traceStarted struct {
	sql string
	at  time.Time
}

func (t *statementTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceStart{}, traceStarted{data.SQL, time.Now()})
}

func (t *statementTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceStart{}).(traceStarted); ok {
		t.record(s.sql, time.Since(s.at))
	}
}

// A statement sent in a batch (idempg runs every statement outside a
// transaction pipelined behind its lock bound, idempg.LockBound) is timed
// from when the batch was sent, or the batch's previous statement's
// result was read, to when its own result was read: its round trip, as
// TraceQueryStart..End times a statement sent alone. The lock bound's
// result is read first but its time is the statement's behind it.
type batchClock struct{ last time.Time }

func (t *statementTimer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchClock{}, &batchClock{time.Now()})
}

func (t *statementTimer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c, ok := ctx.Value(batchClock{}).(*batchClock)
	if !ok || data.SQL == idempg.LockBound {
		return
	}
	now := time.Now()
	t.record(data.SQL, now.Sub(c.last))
	c.last = now
}

func (t *statementTimer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// sqliteConn installs the profile trace on a new SQLite connection.
func (t *statementTimer) sqliteConn(c *sqlite3.Conn) error {
	return c.Trace(sqlite3.TRACE_PROFILE, func(evt sqlite3.TraceEvent, arg1, arg2 any) error {
		s, ok1 := arg1.(*sqlite3.Stmt)
		ns, ok2 := arg2.(int64)
		if ok1 && ok2 {
			t.record(s.SQL(), time.Duration(ns))
		}
		return nil
	})
}

// backlogWatch is an idem.Observer that only keeps each job's backlog
// read: the function an observer's gauge calls (idemotel's
// idemgen.backlog).
type backlogWatch struct {
	mu    sync.Mutex
	reads map[string]func(context.Context) (idem.Backlog, error)
}

func (w *backlogWatch) Watch(job string, backlog func(context.Context) (idem.Backlog, error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reads == nil {
		w.reads = map[string]func(context.Context) (idem.Backlog, error){}
	}
	w.reads[job] = backlog
}
func (w *backlogWatch) RunStart(ctx context.Context, _, _ string) context.Context       { return ctx }
func (w *backlogWatch) RunEnd(context.Context, idem.Report, error)                      {}
func (w *backlogWatch) BatchStart(ctx context.Context, _ string, _ int) context.Context { return ctx }
func (w *backlogWatch) BatchEnd(context.Context, string, error)                         {}
func (w *backlogWatch) Unit(context.Context, string, idem.UnitResult)                   {}
func (w *backlogWatch) Effect(context.Context, string, idem.EffectResult)               {}
func (w *backlogWatch) CallStart(ctx context.Context, _, _, _, _ string) context.Context {
	return ctx
}
func (w *backlogWatch) CallEnd(context.Context, string, idem.EffectResult, time.Duration) {}

// fillHistory fills sp with n rows of history (see historyCounts), in
// SQL: generate_series on PostgreSQL, a recursive CTE on SQLite. Without
// destinations it fills the bookkeeping tables only (the ledger and the
// key records), which is all the operations page reads (ui.go).
func fillHistory(ctx context.Context, sp *space, n int, destinations bool) error {
	pg := sp.pool != nil
	// {lo} and {hi} are each batch's first and last i.
	from := " FROM generate_series({lo}::bigint, {hi}) AS s(i)" // bigint: i * 7919 below
	with := ""
	// ago(x) is the time x seconds before now, as the dialect stores it.
	ago := func(secs string) string { return "now() - make_interval(secs => " + secs + ")" }
	later := "now() + interval '1 day'"
	blob := func(text string) string { return "convert_to(" + text + ", 'UTF8')" }
	if !pg {
		from = " FROM s"
		with = " WITH RECURSIVE s(i) AS (SELECT {lo} UNION ALL SELECT i + 1 FROM s WHERE i < {hi})"
		ago = func(secs string) string {
			return "strftime('%Y-%m-%dT%H:%M:%S', 'now', '-' || (" + secs + ") || ' seconds') || '.000000000Z'"
		}
		later = "strftime('%Y-%m-%dT%H:%M:%S', 'now', '+1 day') || '.000000000Z'"
		blob = func(text string) string { return "CAST(" + text + " AS BLOB)" }
	}
	insert := func(table, cols, exprs string) string {
		return "INSERT INTO " + table + " (" + cols + ")" + with + " SELECT " + exprs + from
	}
	// History rows are stamped long before the measured units' windows.
	dest := func(table, keyPrefix string) string {
		return insert(table, "id, account, amount, updated_at, idemgen_key, idemgen_job_version",
			"'h' || i, 'acct-' || (i % 997), (i % 100000) * 7, "+ago("400 * 86400 - i / 1000")+", '"+keyPrefix+"h' || i, 1")
	}
	// The SQL of historyState: row i's state, and how long ago it was done.
	half, owedFrom := historyBounds(n)
	const r = "((i / 2) % 100)"
	fx := "i % 2 = 0"
	parked := "(" + r + " = 5)"
	owed := "i > " + strconv.Itoa(owedFrom) + " AND NOT " + parked
	leased := owed + " AND " + r + " % 5 < 2"
	done := "i <= " + strconv.Itoa(owedFrom) + " AND NOT " + parked
	const day = 86400
	doneAgo := fmt.Sprintf("CASE WHEN i <= %d THEN %d + (%d - i) * %d / %d ELSE %d + (%d - i) * %d / %d END",
		half, (historyRetentionDays+1)*day, half, 334*day, max(half, 1), // expired: 365 to 31 days ago, oldest first
		day, owedFrom, 28*day, max(owedFrom-half, 1)) // recent: 29 days to 1 day ago
	doneAt := "CASE WHEN " + done + " THEN " + ago(doneAgo) + " END"
	created := "CASE WHEN " + done + " THEN " + ago(doneAgo+" + 1") + " ELSE " + ago("86400") + " END"
	ledger := insert("benchjobs_idem_ledger",
		"effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, lease_owner, lease_until, last_error, created_at, updated_at, done_at, permanent, parked_reason, next_attempt_at",
		strings.Join([]string{
			"CASE WHEN " + fx + " THEN 'bench:announce:v1:h' ELSE 'bench:call:v1:h' END || i",
			"CASE WHEN " + fx + " THEN 'fx_job' ELSE 'call_job' END",
			"CASE WHEN " + fx + " THEN 'announce' ELSE 'call_provider' END",
			"1", "1",
			"CASE WHEN " + fx + " THEN 'bench:fx:h' ELSE 'bench:call:h' END || i",
			blob("'{\"id\":\"h' || i || '\",\"amount\":' || (i % 1000) || '}'"),
			"CASE WHEN " + parked + " THEN '" + idemrt.StoredParked + "' WHEN " + owed + " THEN 'pending' ELSE 'done' END",
			"CASE WHEN " + parked + " THEN 20 ELSE 1 END",
			"CASE WHEN " + leased + " THEN 'history-worker' END",
			"CASE WHEN " + leased + " THEN " + later + " END",
			"CASE WHEN " + parked + " OR (" + owed + " AND NOT (" + leased + ")) THEN 'history: 503' END",
			created,
			"COALESCE(" + doneAt + ", " + ago("3600") + ")",
			doneAt,
			"false",
			"CASE WHEN " + parked + " THEN 'max_attempts' END",
			"CASE WHEN " + owed + " AND NOT (" + leased + ") THEN " + later + " END",
		}, ", "))
	seen := insert("benchjobs_idem_seen", "job, unit_key, payload_hash, job_version, first_seen",
		"'call_job', 'bench:call:h' || i, "+blob("'hash-' || i")+", 1, "+created) +
		" WHERE i % 2 = 1"
	// Each INSERT is its own transaction of historyFillBatch rows: on a
	// shared PostgreSQL, a transaction of minutes would hold up every
	// CREATE INDEX CONCURRENTLY (others' migrations) until it ends.
	stmts := []string{ledger, seen}
	if destinations {
		stmts = append([]string{dest("copy_rows", "bench:copy:"), dest("fx_rows", "bench:fx:")}, stmts...)
	}
	for _, stmt := range stmts {
		for lo := 1; lo <= n; lo += historyFillBatch {
			hi := min(lo+historyFillBatch-1, n)
			batch := strings.NewReplacer("{lo}", strconv.Itoa(lo), "{hi}", strconv.Itoa(hi)).Replace(stmt)
			if err := sp.exec(ctx, batch); err != nil {
				return fmt.Errorf("fill history: %w", err)
			}
		}
	}
	// A table that has served for a year has been vacuumed by autovacuum:
	// its visibility map is set, so index-only scans skip the heap. A
	// fresh fill has none until autovacuum comes round; VACUUM sets it.
	finish := "ANALYZE"
	if pg {
		finish = "VACUUM ANALYZE"
	}
	if err := sp.exec(ctx, finish); err != nil {
		return fmt.Errorf("fill history: %w", err)
	}
	return nil
}

// openStatus opens the space as `idemgen status -db …` does: a
// connection of its own (a pool on PostgreSQL; IMMEDIATE transactions and
// a busy timeout on SQLite), which closing the DB closes, and the package
// as its spec describes it (the generated OpsPackage).
func openStatus(ctx context.Context, sp *space, cfg *config) (*idemops.DB, error) {
	desc := benchjobs.OpsPackage()
	log := slog.New(slog.DiscardHandler)
	var db *idemops.DB
	if sp.url != "" { // PostgreSQL
		pool, err := pgxpool.New(ctx, sp.url)
		if err != nil {
			return nil, err
		}
		db, err = idemops.New(ctx, stdlib.OpenDBFromPool(pool), idempg.NewStore(pool, desc.Tables, nil), idemops.Postgres, desc, log)
		if err != nil {
			pool.Close()
			return nil, err
		}
		db.OnClose(pool.Close)
	} else {
		sdb, err := sql.Open("sqlite3", "file:"+url.PathEscape(sp.path)+"?mode=rw&_txlock=immediate&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		if db, err = idemops.New(ctx, sdb, idemsqlite.NewStore(sdb, desc.Tables, nil), idemops.SQLite, desc, log); err != nil {
			sdb.Close()
			return nil, err
		}
	}
	db.SetDoneCounting(cfg.statusExact, cfg.statusSample)
	return db, nil
}

// measureHistory runs the comparison: the empty side first, then the
// fill, the history side and the purge.
func measureHistory(ctx context.Context, d *database, cfg *config) (*historyResult, error) {
	h := &historyResult{n: cfg.history}
	empty, err := d.fresh(ctx, "history_empty", true)
	if err != nil {
		return h, err
	}
	defer empty.drop()
	if h.empty, _, err = measureHistorySide(ctx, empty, cfg, 0); err != nil {
		return h, fmt.Errorf("empty tables: %w", err)
	}

	timer := &statementTimer{}
	sp, err := d.freshTimed(ctx, "history", true, timer)
	if err != nil {
		return h, err
	}
	if cfg.historyKeep {
		h.kept = sp.name // for EXPLAIN afterwards: the history after the purge
		if sp.pool == nil {
			h.kept = sp.path
			d.removeD = false // the file's directory stays too
		}
	} else {
		defer sp.drop()
	}
	fxMix, callMix := historyCounts(cfg.history)
	start := time.Now()
	if err := fillHistory(ctx, sp, cfg.history, true); err != nil {
		return h, err
	}
	h.fill = time.Since(start)
	if err := checkHistoryFill(ctx, sp, cfg.history, fxMix, callMix); err != nil {
		return h, err
	}
	var st *idemops.Status
	if h.history, st, err = measureHistorySide(ctx, sp, cfg, cfg.history); err != nil {
		return h, fmt.Errorf("history: %w", err)
	}
	// fx_job's run and the Process calls add their own done effects.
	doneWant := map[string]int{"announce": fxMix.done() + cfg.rows, "call_provider": callMix.done() + historyProcessCalls}
	for _, js := range st.Jobs {
		for _, e := range js.Effects {
			h.statusOwed += e.Owed
			h.parked += e.Parked
			if w, ok := doneWant[e.Effect]; ok {
				h.statusDone = append(h.statusDone, doneCount{effect: e.Effect, status: e.Done, want: w, statusEstimated: e.Estimated,
					sample: cmp.Or(cfg.statusSample, idemops.DoneSampleRows)})
			}
		}
	}
	// The Process calls' own effects are done at once: only the history's
	// rows are owed or parked.
	errs := []error{want("status: owed effects", h.statusOwed, fxMix.owed()+callMix.owed()),
		want("status: parked effects", h.parked, fxMix.parked+callMix.parked),
		want("status: effects with done rows", len(h.statusDone), len(doneWant))}
	for _, c := range h.statusDone {
		errs = append(errs, c.check())
	}
	if err := firstErr(errs...); err != nil {
		return h, err
	}
	return h, measurePurge(ctx, sp, cfg, h, timer, fxMix, callMix)
}

// checkHistoryFill counts what the fill wrote.
func checkHistoryFill(ctx context.Context, sp *space, n int, fx, call historyMix) error {
	checks := []struct {
		table, where string
		want         int
	}{
		{"copy_rows", "", n},
		{"fx_rows", "", n},
		{"benchjobs_idem_ledger", "job = 'fx_job' AND state = 'done'", fx.done()},
		{"benchjobs_idem_ledger", "job = 'call_job' AND state = 'pending'", call.owed()},
		{"benchjobs_idem_ledger", "job = 'fx_job' AND state = '" + idemrt.StoredParked + "'", fx.parked},
		{"benchjobs_idem_seen", "", (n + 1) / 2},
	}
	for _, c := range checks {
		got, err := sp.count(ctx, c.table, c.where)
		if err != nil {
			return err
		}
		if err := want("history fill: "+c.table+" "+c.where, got, c.want); err != nil {
			return err
		}
	}
	return nil
}

// measureHistorySide runs copy_job and fx_job over cfg.rows fresh units,
// the Process calls, the gauge and status on sp, which holds historyN
// rows of history (0: empty).
func measureHistorySide(ctx context.Context, sp *space, cfg *config, historyN int) (historySide, *idemops.Status, error) {
	var side historySide
	watch := &backlogWatch{}
	opts := func(g *rows) []idem.Option {
		return append(jobOptions(cfg, g), idem.WithObserver(watch))
	}

	g := newRows(cfg.rows, cfg.batch)
	copyJob, err := benchjobs.NewCopyJob(sp.store, copySource{fetch(g, g.copyRow)}, opts(g)...)
	if err != nil {
		return side, nil, err
	}
	side.copyJob = result{name: "copyjob", units: cfg.rows}
	var rep idem.Report
	if side.copyJob.elapsed, side.copyJob.cpu, err = measure(func() (err error) { rep, err = copyJob.Run(ctx); return err }); err != nil {
		return side, nil, fmt.Errorf("copy_job run: %w", err)
	}
	n, err := sp.count(ctx, "copy_rows", "")
	if err != nil {
		return side, nil, err
	}
	if err := firstErr(want("copy_job: rows in copy_rows", n, historyN+cfg.rows), want("copy_job: inserted", rep.Inserted, cfg.rows)); err != nil {
		return side, nil, err
	}

	p := &provider{}
	fxJob, err := benchjobs.NewFxJob(sp.store, fxSource{fetch(g, g.fxRow)}, benchjobs.FxJobEffects{Announce: p}, opts(g)...)
	if err != nil {
		return side, nil, err
	}
	side.fxJob = result{name: "fxjob", units: cfg.rows}
	if side.fxJob.elapsed, side.fxJob.cpu, err = measure(func() (err error) { rep, err = fxJob.Run(ctx); return err }); err != nil {
		return side, nil, fmt.Errorf("fx_job run: %w", err)
	}
	fxMix, callMix := historyCounts(historyN)
	done, err := sp.count(ctx, "benchjobs_idem_ledger", "job = 'fx_job' AND state = 'done'")
	if err != nil {
		return side, nil, err
	}
	if err := firstErr(want("fx_job: provider calls", int(p.calls.Load()), cfg.rows), want("fx_job: effects done", rep.EffectsDone, cfg.rows),
		want("fx_job: ledger rows done", done, fxMix.done()+cfg.rows)); err != nil {
		return side, nil, err
	}
	if rep.Backlog == nil || rep.Backlog.OwedEffects != int64(fxMix.owed()) || rep.Backlog.ParkedEffects != int64(fxMix.parked) {
		return side, nil, fmt.Errorf("fx_job: backlog %v, want %d owed and %d parked", rep.Backlog, fxMix.owed(), fxMix.parked)
	}

	// Single-unit Process calls of call_job, without its rate (which
	// would pace the calls, not measure them).
	// The provider counts the distinct keys it is called with: each of the
	// calls below must reach it once, under its own key.
	var called struct {
		sync.Mutex
		keys map[string]int
	}
	called.keys = map[string]int{}
	callJob, err := benchjobs.NewCallJob(sp.store,
		benchjobs.CallJobEffects{CallProvider: benchjobs.CallProviderFunc(func(_ context.Context, key string, _ benchjobs.Call) error {
			called.Lock()
			defer called.Unlock()
			called.keys[key]++
			return nil
		})},
		idem.WithLogger(slog.New(slog.DiscardHandler)), idem.WithOwner("bench"), idem.WithObserver(watch),
		idemtest.WithJobEdit(func(j *idemrt.Job[benchjobs.Call]) { j.Effects[0].Rate = idemrt.Rate{} }))
	if err != nil {
		return side, nil, err
	}
	took := make([]time.Duration, historyProcessCalls)
	for i := range took {
		start := time.Now()
		if _, err := callJob.Process(ctx, benchjobs.Call{ID: "p" + strconv.Itoa(i), Amount: int64(i)}); err != nil {
			return side, nil, fmt.Errorf("call_job process %d: %w", i, err)
		}
		took[i] = time.Since(start)
	}
	called.Lock()
	distinct := len(called.keys)
	called.Unlock()
	if err := want("call_job: keys called", distinct, historyProcessCalls); err != nil {
		return side, nil, err
	}
	slices.Sort(took)
	side.processP50 = took[len(took)/2]
	side.process = took[int(math.Ceil(0.99*float64(len(took))))-1]

	// The gauge: each job's backlog read, three times.
	for range 3 {
		for _, job := range []string{"fx_job", "call_job"} {
			read := watch.reads[job]
			if read == nil {
				return side, nil, fmt.Errorf("%s: the observer was given no backlog read", job)
			}
			start := time.Now()
			b, err := read(ctx)
			side.backlog = max(side.backlog, time.Since(start))
			if err != nil {
				return side, nil, fmt.Errorf("%s backlog: %w", job, err)
			}
			if job == "call_job" && (b.OwedEffects != int64(callMix.owed()) || b.ParkedEffects != int64(callMix.parked)) {
				return side, nil, fmt.Errorf("call_job: backlog %+v, want %d owed and %d parked", b, callMix.owed(), callMix.parked)
			}
		}
	}

	db, err := openStatus(ctx, sp, cfg)
	if err != nil {
		return side, nil, fmt.Errorf("open for status: %w", err)
	}
	defer db.Close()
	var st *idemops.Status
	for range 3 {
		start := time.Now()
		if st, err = db.Status(ctx); err != nil {
			return side, nil, fmt.Errorf("status: %w", err)
		}
		side.status = max(side.status, time.Since(start))
	}
	return side, st, nil
}

// measurePurge runs fx_job's and call_job's Purge over the history (in
// batches of 1,000) while copy_job backfills cfg.rows new units beside it.
func measurePurge(ctx context.Context, sp *space, cfg *config, h *historyResult, timer *statementTimer, fxMix, callMix historyMix) error {
	before, err := sp.count(ctx, "benchjobs_idem_ledger", "")
	if err != nil {
		return err
	}
	quiet := []idem.Option{idem.WithLogger(slog.New(slog.DiscardHandler)), idem.WithOwner("bench-purge")}
	fxJob, err := benchjobs.NewFxJob(sp.store, fxSource{}, benchjobs.FxJobEffects{Announce: &provider{}}, quiet...)
	if err != nil {
		return err
	}
	callJob, err := benchjobs.NewCallJob(sp.store, benchjobs.CallJobEffects{CallProvider: reservingProvider}, quiet...)
	if err != nil {
		return err
	}
	g := newRows(cfg.rows, cfg.batch)
	g.prefix = "b"
	copyJob, err := benchjobs.NewCopyJob(sp.store, copySource{fetch(g, g.copyRow)}, jobOptions(cfg, g)...)
	if err != nil {
		return err
	}

	timer.reset()
	purgeDone := make(chan struct{})
	var purgeErr error
	start := time.Now()
	go func() {
		defer close(purgeDone)
		for _, purge := range []func(context.Context) (int64, error){fxJob.Purge, callJob.Purge} {
			n, err := purge(ctx)
			h.purged += n
			if err != nil {
				purgeErr = err
				return
			}
		}
		h.purge = time.Since(start)
	}()
	h.beside = result{name: "beside", units: cfg.rows}
	var rep idem.Report
	h.beside.elapsed, h.beside.cpu, err = measure(func() (err error) { rep, err = copyJob.Backfill(ctx, g.window(time.Now())); return err })
	select {
	case <-purgeDone:
	default:
		h.besideOverlap = true
	}
	<-purgeDone // bounded: Purge ends when it finds no more expired rows, or errs
	if err != nil {
		return fmt.Errorf("copy_job beside the purge: %w", err)
	}
	if purgeErr != nil {
		return fmt.Errorf("purge: %w", purgeErr)
	}
	timed := timer.reset()
	// copy_job deletes nothing: every DELETE was one of Purge's batches.
	h.purgeBatches, h.purgeMaxBatch, h.purgeSlowest, h.purgeOverSecond = timed.deletes, timed.longest, timed.longestName, timed.overSecond
	after, err := sp.count(ctx, "benchjobs_idem_ledger", "")
	if err != nil {
		return err
	}
	h.purgedLedger = before - after
	expired := fxMix.expired + callMix.expired
	return firstErr(want("purge: ledger rows", h.purgedLedger, expired),
		want("purge: rows in all (ledger and call_job's key records)", int(h.purged), expired+callMix.expired),
		want("copy_job beside the purge: inserted", rep.Inserted, cfg.rows),
		errIf(timed.deletes == 0, errors.New("purge: no DELETE statement was timed")))
}

func errIf(cond bool, err error) error {
	if cond {
		return err
	}
	return nil
}
