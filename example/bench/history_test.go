package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

var historyRatios = regexp.MustCompile(` history/copyjob=\S+ history/fxjob=\S+ history/p99=\S+ history/backlog_s=\S+ history/status_s=\S+ history/purge_batch_s=\S+ history/beside=\S+$`)

// historySmoke runs the -history measurement alone at a small size and
// checks that it did its work; run itself fails on a wrong count (the
// fill, the jobs' rows and effects, the backlog, status, the purge).
func historySmoke(t *testing.T, extra ...string) {
	t.Helper()
	const n, units = 20000, 1000
	args := append([]string{"-only", "history", "-history", "20000", "-rows", "1000", "-batch", "300", "-concurrency", "4",
		"-status-exact", "1000", "-status-sample", "10000"}, extra...)
	var out bytes.Buffer
	res, err := run(t.Context(), args, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	h := res.history
	if h == nil {
		t.Fatal("no history result")
	}
	fx, call := historyCounts(n)
	// Half expired and a twentieth owed, but for the parked rows among them.
	if fx.expired+call.expired != n/2-n/200 || fx.owed()+call.owed() != n/20-n/2000 || fx.parked+call.parked != n/100 {
		t.Errorf("history mix %+v %+v: want half expired, 5%% owed, 1%% parked", fx, call)
	}
	if h.purgedLedger != fx.expired+call.expired || int(h.purged) != h.purgedLedger+call.expired {
		t.Errorf("purged %d rows, %d of them ledger rows; want %d and %d", h.purged, h.purgedLedger, fx.expired+2*call.expired, fx.expired+call.expired)
	}
	// Batches of 1,000: each effect's rows, then call_job's key records,
	// each ended by a batch that finds fewer.
	if min := (int(h.purged) + 999) / 1000; h.purgeBatches < min || h.purgeBatches > min+3 {
		t.Errorf("%d purge batches for %d rows, want %d to %d", h.purgeBatches, h.purged, min, min+3)
	}
	if h.statusOwed != fx.owed()+call.owed() || h.parked != fx.parked+call.parked {
		t.Errorf("status: %d owed, %d parked", h.statusOwed, h.parked)
	}
	for _, side := range []historySide{h.empty, h.history} {
		if side.copyJob.units != units || side.fxJob.units != units || side.copyJob.elapsed <= 0 || side.fxJob.elapsed <= 0 ||
			side.process <= 0 || side.backlog <= 0 || side.status <= 0 {
			t.Errorf("a side measured nothing: %+v", side)
		}
	}
	if h.beside.units != units || h.beside.elapsed <= 0 || h.purge <= 0 || h.purgeMaxBatch <= 0 {
		t.Errorf("purge beside copy_job measured nothing: %+v", h)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ratios: ") || !historyRatios.MatchString(last) {
		t.Errorf("last line %q is not the ratios line with the history figures", last)
	}
	// Status counts the done rows exactly up to -status-exact and
	// estimates them above, as on a large ledger; run fails when an
	// estimate is more than doneTolerance off the truth.
	if len(h.statusDone) != 2 {
		t.Errorf("status done counts %+v, want announce's and call_provider's", h.statusDone)
	}
	for _, c := range h.statusDone {
		if !c.statusEstimated {
			t.Errorf("status counted %s's done rows exactly past -status-exact: %+v", c.effect, c)
		}
	}
}

func TestHistorySQLite(t *testing.T) { historySmoke(t) }

func TestHistoryPostgres(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the history measurement there too")
	}
	historySmoke(t, "-db", url)
}
