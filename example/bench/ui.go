package main

// The -ui measurement (issue 43): the operations page's pages (idem/idemui,
// as `idemgen ui` and a service's mount serve them) on a ledger of N rows
// of history, filled as -history fills it (fillHistory: a year of done
// rows, the newest 5% owed, 1% parked). Each page is requested in
// process, with no network, the slowest of three counting.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem/idemui"
)

// uiTarget is the most a page may take on the -ui ledger.
const uiTarget = time.Second

// uiResult is the -ui measurement.
type uiResult struct {
	n     int
	fill  time.Duration // 0: the space was filled before (-ui-space)
	kept  string        // -ui-keep, -ui-space: the schema or file, left in place
	pages []uiPage
}

type uiPage struct {
	name, path string
	took       time.Duration // the slowest of 3
	bytes      int
	before     bool // what the front page read before its counts stopped at a limit: a baseline, not a page
}

// uiParkedKey and uiUnitKey are history row 11's keys: call_job's, parked
// ((11/2) % 100 is 5: historyState).
const (
	uiParkedKey = "bench:call:v1:h11"
	uiUnitKey   = "bench:call:h11"
)

var nextPage = regexp.MustCompile(`id="next" href="([^"]+)"`)

func measureUI(ctx context.Context, d *database, cfg *config) (*uiResult, error) {
	r := &uiResult{n: cfg.uiRows}
	var sp *space
	if cfg.uiSpace != "" {
		// A space an earlier -ui-keep left, filled already.
		sp = &space{name: cfg.uiSpace, path: cfg.uiSpace}
		if d.postgres() {
			u, err := url.Parse(d.url)
			if err != nil {
				return r, err
			}
			q := u.Query()
			q.Set("search_path", cfg.uiSpace)
			u.RawQuery = q.Encode()
			sp.url = u.String()
		}
		r.kept = cfg.uiSpace
	} else {
		var err error
		if sp, err = d.fresh(ctx, "ui", true); err != nil {
			return r, err
		}
		if cfg.uiKeep {
			r.kept = sp.name
			if !d.postgres() {
				r.kept, d.removeD = sp.path, false
			}
		} else {
			defer sp.drop()
		}
		start := time.Now()
		if err := fillHistory(ctx, sp, cfg.uiRows, false); err != nil {
			return r, err
		}
		r.fill = time.Since(start)
	}
	db, err := openStatus(ctx, sp, cfg)
	if err != nil {
		return r, err
	}
	defer db.Close()
	h, err := idemui.New(db, idemui.Options{ReadOnly: true})
	if err != nil {
		return r, err
	}
	get := func(path string) (string, time.Duration, error) {
		var slowest time.Duration
		var body string
		for range 3 {
			rec := httptest.NewRecorder()
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			slowest = max(slowest, time.Since(t0))
			b, _ := io.ReadAll(rec.Result().Body)
			body = string(b)
			if rec.Code != http.StatusOK {
				return body, 0, fmt.Errorf("ui %s: status %d: %s", path, rec.Code, body)
			}
		}
		return body, slowest, nil
	}
	pages := []struct{ name, path, want string }{
		{"parked, first page", "/parked", `id="parked-effects"`},
		{"parked, next page", "", ""}, // the first page's next link
		{"parked, key prefix that matches", "/parked?q=bench:call:v1:h11", uiParkedKey},
		{"parked, key prefix that matches nothing", "/parked?q=nothing-starts-so", `id="none"`},
		{"key history, an effect key", "/key?k=" + uiParkedKey, "history: 503"},
		{"key history, a unit key", "/key?k=" + uiUnitKey, uiParkedKey},
		{"retry confirmation", "/confirm?action=retry&key=" + uiParkedKey, uiParkedKey},
		// Last: the front page reads what status reads, and more.
		{"jobs, chart of 3 h", "/", `<tr data-effect="call_provider">`},
		{"jobs, chart of 24 h", "/?hours=24", `<tr data-effect="announce">`},
	}
	// The baseline, in the same run: the reads the front page made before
	// its counts stopped at Options.CountLimit (the whole backlog by
	// status, again by the chart, and status's sample of done rows),
	// which idemgen status still makes. Once: on a large ledger it takes
	// minutes.
	t0 := time.Now()
	if _, err := db.Status(ctx); err != nil {
		return r, err
	}
	if _, err := db.Activity(ctx, 3*time.Hour); err != nil {
		return r, err
	}
	r.pages = append(r.pages, uiPage{name: "before: front page's reads, uncapped", path: "Status + Activity(3h), once", took: time.Since(t0), before: true})
	fmt.Fprintf(os.Stderr, "bench: ui: before: %s\n", time.Since(t0).Round(time.Millisecond))
	next := ""
	for _, p := range pages {
		if p.path == "" {
			p.path, p.want = next, `id="parked-effects"`
		}
		body, took, err := get(p.path)
		if err != nil {
			return r, err
		}
		if !strings.Contains(body, p.want) {
			return r, fmt.Errorf("ui %s: no %q in the page", p.path, p.want)
		}
		if m := nextPage.FindStringSubmatch(body); m != nil && next == "" {
			next = "/" + strings.ReplaceAll(m[1], "&amp;", "&")
		}
		r.pages = append(r.pages, uiPage{name: p.name, path: p.path, took: took, bytes: len(body)})
		fmt.Fprintf(os.Stderr, "bench: ui: %s: %s\n", p.name, took.Round(time.Millisecond)) // as it goes: a long page shows where it is
	}
	return r, nil
}

func (r *uiResult) print(out io.Writer) {
	fmt.Fprintf(out, "\noperations page (idemui) on a ledger of %d rows of history (filled in %s), the slowest of 3, target %s each:\n",
		r.n, r.fill.Round(time.Second), uiTarget)
	if r.kept != "" {
		fmt.Fprintf(out, "  kept (-ui-keep; time it again with -ui-space %s)\n", r.kept)
	}
	for _, p := range r.pages {
		verdict := "ok"
		if p.took > uiTarget {
			verdict = "OVER"
		}
		if p.before {
			verdict = "baseline"
		}
		fmt.Fprintf(out, "  %-42s %8s  %6d bytes  %s   %s\n", p.name, p.took.Round(time.Millisecond), p.bytes, verdict, p.path)
	}
}
