package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
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

// The short soak: three worker processes on River and PostgreSQL, a
// SIGKILL every second or two for 25 seconds while 500 payments flow, then
// every payment written once, receipted once, nothing owed, every River job
// completed. About a minute; `go run ./example/soak` runs longer ones.
func TestSoak(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; the soak runs on PostgreSQL")
	}
	cfg, err := parseFlags([]string{"-postgres", url, "-workers", "3", "-duration", "25s", "-units", "500",
		"-kill-every", "1500ms", "-settle", "90s"}, os.Stderr)
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
	if res.kills < 5 {
		t.Fatalf("only %d kills: the soak did not exercise recovery", res.kills)
	}
	if !strings.Contains(res.String(), "duplicates: 0") {
		t.Fatalf("report: %s", res)
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
