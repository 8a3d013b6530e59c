package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
)

// engineOptions turns the -batch, -concurrency and -write-ahead flags
// into idem options.
func engineOptions(cfg *config) []idem.Option {
	return []idem.Option{idem.WithBatchSize(cfg.batch), idem.WithEffectConcurrency(cfg.concurrency), idem.WithWriteAhead(cfg.writeAhead)}
}

// jobOptions are the options of every generated job the benchmark runs:
// no logging (a production logger at warn level formats nothing for a
// healthy run either), a first window that starts at the rows' base time,
// enough pages for the whole window, and the engine options above.
func jobOptions(cfg *config, g *rows) []idem.Option {
	opts := []idem.Option{
		idem.WithLogger(slog.New(slog.DiscardHandler)),
		idem.WithStart(g.base),
		idem.WithMaxPages(g.n/g.page + 2),
		idem.WithOwner("bench"),
	}
	return append(opts, engineOptions(cfg)...)
}

// rows describes the benchmark's units: n of them, yielded page rows at a
// time, row i stamped base + i µs (microseconds, so that PostgreSQL gives
// back exactly what was written and a re-run finds every row unchanged).
// Nothing is held between pages: a page is built when it is fetched.
type rows struct {
	n, page int
	base    time.Time
	prefix  string // of the rows' ids: "" is "r"; the history's rows are "h…" (history.go)
}

func newRows(n, page int) *rows {
	return &rows{n: n, page: page, base: time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)}
}

func (g *rows) id(i int) string {
	if g.prefix != "" {
		return g.prefix + strconv.Itoa(i)
	}
	return "r" + strconv.Itoa(i)
}
func (g *rows) account(i int) string             { return "acct-" + strconv.Itoa(i%997) }
func (g *rows) amount(i int) int64               { return int64(i%100000) * 7 }
func (g *rows) updatedAt(i int) time.Time        { return g.base.Add(time.Duration(i) * time.Microsecond) }
func (g *rows) window(now time.Time) idem.Window { return idem.Window{Since: g.base, Until: now} }

func (g *rows) copyRow(i int) benchjobs.CopyRow {
	return benchjobs.CopyRow{ID: g.id(i), Account: g.account(i), Amount: g.amount(i), UpdatedAt: g.updatedAt(i)}
}

func (g *rows) fxRow(i int) benchjobs.FxRow {
	return benchjobs.FxRow{ID: g.id(i), Account: g.account(i), Amount: g.amount(i), UpdatedAt: g.updatedAt(i)}
}

// fetch is the generated sources' Fetch over g: the page token is the
// index of the page's first row; rows outside w are left out.
func fetch[U any](g *rows, mk func(int) U) func(ctx context.Context, w idem.Window, page string) ([]U, string, error) {
	return func(ctx context.Context, w idem.Window, page string) ([]U, string, error) {
		start := 0
		if page != "" {
			var err error
			if start, err = strconv.Atoi(page); err != nil {
				return nil, "", fmt.Errorf("bad page token %q", page)
			}
		}
		end := min(start+g.page, g.n)
		out := make([]U, 0, end-start)
		for i := start; i < end; i++ {
			if t := g.updatedAt(i); !t.Before(w.Since) && t.Before(w.Until) {
				out = append(out, mk(i))
			}
		}
		next := ""
		if end < g.n {
			next = strconv.Itoa(end)
		}
		return out, next, nil
	}
}

type copySource struct {
	f func(context.Context, idem.Window, string) ([]benchjobs.CopyRow, string, error)
}

func (s copySource) Fetch(ctx context.Context, w idem.Window, page string) ([]benchjobs.CopyRow, string, error) {
	return s.f(ctx, w, page)
}

type fxSource struct {
	f func(context.Context, idem.Window, string) ([]benchjobs.FxRow, string, error)
}

func (s fxSource) Fetch(ctx context.Context, w idem.Window, page string) ([]benchjobs.FxRow, string, error) {
	return s.f(ctx, w, page)
}

// provider is the effect's provider: it sleeps latency, counts calls and
// records the most calls it had in flight at once.
type provider struct {
	latency             time.Duration
	calls               atomic.Int64
	seen                sync.Map // idempotency keys: a real provider dedups on them
	repeats             atomic.Int64
	inFlight, maxFlight atomic.Int64
}

func (p *provider) call(ctx context.Context, key string) error {
	if _, again := p.seen.LoadOrStore(key, struct{}{}); again {
		p.repeats.Add(1)
	}
	n := p.inFlight.Add(1)
	for m := p.maxFlight.Load(); n > m && !p.maxFlight.CompareAndSwap(m, n); m = p.maxFlight.Load() {
	}
	defer p.inFlight.Add(-1)
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	p.calls.Add(1)
	return nil
}

func (p *provider) Announce(ctx context.Context, key string, u benchjobs.FxRow) error {
	return p.call(ctx, key)
}

// want fails unless got == want; the benchmark refuses to report a figure
// whose work was not done.
func want(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s: got %d, want %d", what, got, want)
	}
	return nil
}

// measureCopyJob runs copy_job once over cfg.rows fresh units.
func measureCopyJob(ctx context.Context, d *database, cfg *config) (result, error) {
	res := result{name: "copyjob", what: "copy_job first run (no effects)", units: cfg.rows}
	if d.postgres() && cfg.writeAhead {
		res.what = "copy_job first run (no effects; a batch commits while the next is written)"
	}
	sp, err := d.fresh(ctx, "copyjob", true)
	if err != nil {
		return res, err
	}
	defer sp.drop()
	g := newRows(cfg.rows, cfg.batch)
	job, err := benchjobs.NewCopyJob(sp.store, copySource{fetch(g, g.copyRow)}, jobOptions(cfg, g)...)
	if err != nil {
		return res, err
	}
	var rep idem.Report
	res.elapsed, res.cpu, err = measure(func() (err error) {
		rep, err = job.Run(ctx)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("copy_job run: %w", err)
	}
	n, err := sp.count(ctx, "copy_rows", "")
	if err != nil {
		return res, err
	}
	res.rows, res.calls = n, -1
	res.check = fmt.Sprintf("rows=%d inserted=%d", n, rep.Inserted)
	return res, firstErr(want("copy_job: rows in copy_rows", n, cfg.rows), want("copy_job: inserted", rep.Inserted, cfg.rows))
}

// measureFxJob runs fx_job over cfg.rows fresh units with a provider that
// does not sleep (so the figure is the database work), then re-runs the
// same applied window through Backfill: same keys, same ledger.
func measureFxJob(ctx context.Context, d *database, cfg *config) (first, rerun result, err error) {
	first = result{name: "fxjob", what: "fx_job first run (1 effect, provider 0 ms)", units: cfg.rows}
	rerun = result{name: "rerun", what: "fx_job re-run of the applied window", units: cfg.rows}
	sp, err := d.fresh(ctx, "fxjob", true)
	if err != nil {
		return first, rerun, err
	}
	defer sp.drop()
	g := newRows(cfg.rows, cfg.batch)
	p := &provider{}
	job, err := benchjobs.NewFxJob(sp.store, fxSource{fetch(g, g.fxRow)}, benchjobs.FxJobEffects{Announce: p}, jobOptions(cfg, g)...)
	if err != nil {
		return first, rerun, err
	}
	var rep idem.Report
	first.elapsed, first.cpu, err = measure(func() (err error) {
		rep, err = job.Run(ctx)
		return err
	})
	if err != nil {
		return first, rerun, fmt.Errorf("fx_job run: %w", err)
	}
	n, err := sp.count(ctx, "fx_rows", "")
	if err != nil {
		return first, rerun, err
	}
	done, err := sp.count(ctx, "benchjobs_idem_ledger", "state = 'done'")
	if err != nil {
		return first, rerun, err
	}
	calls := int(p.calls.Load())
	first.rows, first.calls = n, calls
	first.check = fmt.Sprintf("rows=%d calls=%d ledger done=%d", n, calls, done)
	if err := firstErr(want("fx_job: rows in fx_rows", n, cfg.rows), want("fx_job: provider calls", calls, cfg.rows),
		want("fx_job: effects done", rep.EffectsDone, cfg.rows), want("fx_job: ledger rows done", done, cfg.rows)); err != nil {
		return first, rerun, err
	}

	rerun.elapsed, rerun.cpu, err = measure(func() (err error) {
		rep, err = job.Backfill(ctx, g.window(time.Now()))
		return err
	})
	if err != nil {
		return first, rerun, fmt.Errorf("fx_job re-run: %w", err)
	}
	if n, err = sp.count(ctx, "fx_rows", ""); err != nil {
		return first, rerun, err
	}
	calls = int(p.calls.Load())
	rerun.rows, rerun.calls = n, calls-cfg.rows
	rerun.check = fmt.Sprintf("rows=%d unchanged=%d new calls=%d", n, rep.Unchanged, calls-cfg.rows)
	return first, rerun, firstErr(want("fx_job re-run: rows in fx_rows", n, cfg.rows), want("fx_job re-run: unchanged", rep.Unchanged, cfg.rows),
		want("fx_job re-run: provider calls", calls, cfg.rows))
}

// measureEffects runs fx_job over cfg.effectsN fresh units with a provider
// that sleeps cfg.latency: the whole run's wall time, database work
// included, against the bound concurrency / latency.
func measureEffects(ctx context.Context, d *database, cfg *config) (result, int, error) {
	res := result{name: "effects", what: fmt.Sprintf("fx_job effects, provider %v", cfg.latency), units: cfg.effectsN}
	sp, err := d.fresh(ctx, "effects", true)
	if err != nil {
		return res, 0, err
	}
	defer sp.drop()
	g := newRows(cfg.effectsN, cfg.batch)
	p := &provider{latency: cfg.latency}
	job, err := benchjobs.NewFxJob(sp.store, fxSource{fetch(g, g.fxRow)}, benchjobs.FxJobEffects{Announce: p}, jobOptions(cfg, g)...)
	if err != nil {
		return res, 0, err
	}
	var rep idem.Report
	res.elapsed, res.cpu, err = measure(func() (err error) {
		rep, err = job.Run(ctx)
		return err
	})
	if err != nil {
		return res, 0, fmt.Errorf("fx_job run: %w", err)
	}
	calls, peak := int(p.calls.Load()), int(p.maxFlight.Load())
	n, err := sp.count(ctx, "fx_rows", "")
	if err != nil {
		return res, 0, err
	}
	res.rows, res.calls = n, calls
	res.check = fmt.Sprintf("calls=%d most in flight=%d", calls, peak)
	return res, peak, firstErr(want("effects: provider calls", calls, cfg.effectsN), want("effects: done", rep.EffectsDone, cfg.effectsN))
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
