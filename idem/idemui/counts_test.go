package idemui_test

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemui"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// Counts that are true after a version bump: 1,500 notices done under v1
// (done long ago) and 50 under v2. status counts both exactly; the page,
// which reads at most twice its count limit of done rows per effect,
// counts them exactly too, and past that shows each version's count as a
// lower bound, never a current version with none because the older one
// spent the limit.
func TestDoneCountsPerVersionAfterABump(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db) // notify_new_invoice v2: inv-1 parked, inv-2 done, inv-3 leased
		const cols = "job, effect, job_version, payload, state, attempts, result, last_error, created_at, updated_at, permanent, parked_reason"
		copies := func(n int, suffix string, version int, doneAt string) string {
			return `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ` + itoa(n) + `)
INSERT INTO billing_idem_ledger (effect_key, unit_key, effect_version, done_at, ` + cols + `)
SELECT effect_key || '` + suffix + `' || i, unit_key || '` + suffix + `' || i, ` + itoa(version) + `, ` + doneAt + `, ` + cols + `
FROM billing_idem_ledger CROSS JOIN n WHERE effect_key = '` + billingtest.DoneKey + `'`
		}
		db.Exec(t, copies(1500, "-v1-", 1, "'2026-01-01T00:00:00.000000000Z'"), copies(1500, "-v1-", 1, "'2026-01-01'::timestamptz"))
		db.Exec(t, copies(49, "-v2-", 2, "done_at"), copies(49, "-v2-", 2, "done_at"))

		st, err := db.Ops.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		es := notifyStatus(t, st)
		if es.Done != 50 || es.History != 1500 || !slices.Equal(es.Superseded, []int{1}) || es.Estimated || es.Again != 1500 {
			t.Fatalf("status: done %d, history %d under %v (estimated %v), again %d; want 50 under v2, 1500 under v1, exact, 1500 to perform again",
				es.Done, es.History, es.Superseded, es.Estimated, es.Again)
		}

		page := func(limit int) (done, history string) {
			h, err := idemui.New(db.Ops, idemui.Options{ReadOnly: true, CountLimit: limit, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			code, body := newBrowser(t, mount(t, h)).get("")
			if code != http.StatusOK {
				t.Fatalf("front page: %d\n%s", code, body)
			}
			row := regexp.MustCompile(`(?s)<tr data-effect="notify_new_invoice">.*?</tr>`).FindString(body)
			cells := regexp.MustCompile(`<td class="n done">([^<]*)</td>\s*<td class="n">([^<]*)</td>`).FindStringSubmatch(row)
			if cells == nil {
				t.Fatalf("no done cells in %q", row)
			}
			unescape := strings.NewReplacer("&#43;", "+", "&#39;", "'")
			return unescape.Replace(cells[1]), unescape.Replace(cells[2])
		}
		// The default limit (1,000) reads all 1,550 done rows: exact, as status.
		if done, history := page(0); done != "50" || history != "1500 under v1; 1000+ to perform again" {
			t.Errorf("page, limit 1000: done %q, history %q; want 50, and 1500 under v1; 1000+ to perform again", done, history)
		}
		// At 100 it reads the newest 100 and the oldest 100: lower bounds, marked.
		if done, history := page(100); done != "50+" || history != "150+ under v1; 100+ to perform again" {
			t.Errorf("page, limit 100: done %q, history %q; want 50+, and 150+ under v1; 100+ to perform again", done, history)
		}
	})
}

func notifyStatus(t *testing.T, st *idemops.Status) idemops.EffectStatus {
	t.Helper()
	for _, js := range st.Jobs {
		for _, es := range js.Effects {
			if js.Job == "invoice_sync" && es.Effect == "notify_new_invoice" {
				return es
			}
		}
	}
	t.Fatal("status has no notify_new_invoice")
	return idemops.EffectStatus{}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A notice whose worker was killed between the provider's call and its
// record was performed again: done after 2 attempts and no failure on
// record. Its history says the provider may have got the key twice.
func TestKeyHistoryShowsARepeatedCall(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		repeat := "UPDATE billing_idem_ledger SET attempts = 2, last_error = NULL WHERE effect_key = '" + billingtest.DoneKey + "'"
		db.Exec(t, repeat, repeat)
		h, err := idemui.New(db.Ops, idemui.Options{ReadOnly: true, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		code, body := newBrowser(t, mount(t, h)).get("key?k=" + billingtest.DoneKey)
		calls := regexp.MustCompile(`<td class="calls">([^<]*)</td>`).FindStringSubmatch(body)
		if code != http.StatusOK || calls == nil || !strings.Contains(calls[1], "up to 2: a repeat") || !strings.Contains(calls[1], "may have got this key 2 times") {
			t.Fatalf("key page: %d, calls %q\n%s", code, calls, body)
		}
		rows, err := db.Ops.History(t.Context(), billingtest.ParkedKey) // parked at its first attempt, its error on record
		if err != nil || len(rows.Effects) != 1 || rows.Effects[0].ProviderCalls != "at most 1" {
			t.Fatalf("history of %s: %+v, %v", billingtest.ParkedKey, rows, err)
		}
	})
}
