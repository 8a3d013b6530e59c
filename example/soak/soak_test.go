package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the supervisor re-exec this test binary as its workers.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("soak worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A soakTier is how long the test soaks run and what each must have
// exercised by then: the default tier's keep go test ./... inside its
// budget, the stress tier's (IDEMGEN_STRESS=1, as .ci/run sets it) are
// the soaks this package always ran.
type soakTier struct {
	duration, units                  string
	minKills, minCuts, minCommitCuts int
}

func testSoakTier() soakTier {
	if os.Getenv("IDEMGEN_STRESS") != "" {
		return soakTier{duration: "25s", units: "500", minKills: 5, minCuts: 20, minCommitCuts: 5}
	}
	return soakTier{duration: "12s", units: "240", minKills: 3, minCuts: 8, minCommitCuts: 2}
}

// The short soak: three worker processes on River and PostgreSQL, a
// SIGKILL every second or two and a connection cut at a proxy every half
// second (half of them right after a COMMIT, before its answer) for 12
// seconds (25 with IDEMGEN_STRESS) while 240 payments (500) flow, then
// every payment written once, receipted once, nothing owed, every River
// job completed. `go run ./example/soak` runs longer ones.
func TestSoak(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; the soak runs on PostgreSQL")
	}
	tier := testSoakTier()
	res := soak(t, "-postgres", url, "-workers", "3", "-duration", tier.duration, "-units", tier.units,
		"-kill-every", "1500ms", "-cut-every", "500ms", "-settle", "90s")
	if res.kills < tier.minKills {
		t.Fatalf("only %d kills: the soak did not exercise recovery", res.kills)
	}
	if res.cuts == nil || res.cuts.Cut < tier.minCuts || res.cuts.CommitCuts < tier.minCommitCuts {
		t.Fatalf("cuts %+v: the soak did not exercise cut connections", res.cuts)
	}
}

// PostgreSQL's own failures: on a server of the soak's own, crashed with an
// immediate shutdown and started again (crash recovery) every 5 seconds or
// so for 25 seconds, beside the kills and cuts. Each time the fleet must
// complete jobs again within a minute, and in the end every invariant
// holds. It needs PostgreSQL's server binaries, not IDEMGEN_TEST_POSTGRES,
// and belongs to the stress tier (IDEMGEN_STRESS=1, as .ci/run runs it):
// a server of its own, started and crashed, is 30 s of waiting.
// TestThrowawayClusterRecoversFromACrash keeps the crash and restart
// themselves in the default tier.
func TestSoakSurvivesPostgresCrashes(t *testing.T) {
	if os.Getenv("IDEMGEN_STRESS") == "" {
		t.Skip("the fleet soak through PostgreSQL crashes runs with IDEMGEN_STRESS=1 (.ci/run sets it)")
	}
	if _, err := findPostgresBin(); err != nil {
		t.Skipf("%v: the soak cannot start a server of its own to crash", err)
	}
	res := soak(t, "-workers", "3", "-duration", "25s", "-units", "500", "-kill-every", "2s",
		"-pg-crash-every", "5s", "-pg-down", "1s", "-cut-every", "1s", "-settle", "90s")
	if len(res.crashes) < 2 {
		t.Fatalf("only %d crashes: the soak did not exercise crash recovery", len(res.crashes))
	}
}

// soak runs one soak with args and fails t unless every invariant held.
func soak(t *testing.T, args ...string) result {
	t.Helper()
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := supervise(context.Background(), cfg, os.Args[0], &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("%s%s", out.String(), res)
	if err := res.verdict(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.String(), "duplicates: 0") {
		t.Fatalf("report: %s", res)
	}
	return res
}

// The verdict fails a soak whose fleet did not come back after a crash
// while jobs were open, and not one where nothing was left to do.
func TestVerdictCatchesAFleetThatDidNotRecover(t *testing.T) {
	ok := result{units: 1, rows: 1, keys: 1, done: 1, riverJobs: map[string]int{"completed": 1}, prov: tally{applied: map[string]int{"evt-000000": 1}}}
	ok.crashes = []recovery{{down: time.Second, working: -1, open: 0}}
	if err := ok.verdict(); err != nil {
		t.Fatalf("nothing left to do after the crash: %v", err)
	}
	stuck := ok
	stuck.crashes = []recovery{{down: time.Second, working: -1, open: 7}}
	if err := stuck.verdict(); err == nil || !strings.Contains(err.Error(), "after PostgreSQL crash 1 the fleet completed no job") {
		t.Fatalf("verdict %v, want the crash the fleet did not recover from", err)
	}
}

// The soak can fail: workers planted with a provider call that drops the
// Idempotency-Key are caught, with no kill needed.
func TestSoakCatchesAPlantedBug(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; the soak runs on PostgreSQL")
	}
	cfg, err := parseFlags([]string{"-postgres", url, "-workers", "2", "-duration", "2s", "-units", "40",
		"-kill-every", "1h", "-settle", "30s", "-bug", "no-key"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := supervise(context.Background(), cfg, os.Args[0], &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	err = res.verdict()
	if err == nil || !strings.Contains(err.Error(), "40 provider requests without an Idempotency-Key") {
		t.Fatalf("verdict %v, want the 40 keyless requests reported\n%s", err, res)
	}
}
