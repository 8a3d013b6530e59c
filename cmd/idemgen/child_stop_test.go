//go:build linux

package main

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/generator"
)

// idemgen ui runs the page in its database child. However idemgen is
// stopped (a supervisor's SIGTERM, an interrupt, a SIGKILL), the child
// ends with it and frees the port: none keeps serving on its own.
func TestDatabaseChildStopsWithIdemgen(t *testing.T) {
	dir := t.TempDir()
	idemgen, child := filepath.Join(dir, "idemgen"), filepath.Join(dir, "idemgen-ops")
	for _, build := range [][]string{{"-o", idemgen}, {"-tags", "idemgen_ops", "-o", child}} {
		args := append(append([]string{"build"}, build...), "github.com/idemgen/idemgen/cmd/idemgen")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	dbPath := filepath.Join(dir, "billing.db")
	db, err := sql.Open("sqlite3", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := billing.NewSQLiteStore(db).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	spec, err := filepath.Abs(filepath.Join("..", "..", "example", "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			log, err := os.Create(filepath.Join(t.TempDir(), "ui.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			parent := exec.Command(idemgen, "ui", "-db", dbPath, "-f", spec, "-addr", "127.0.0.1:"+port)
			parent.Env = append(os.Environ(), cli.OpsExeEnv+"="+child)
			parent.Stdout, parent.Stderr = log, log
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- parent.Wait() }()
			defer func() { _ = parent.Process.Kill() }()

			// Serving: the page answers, from the child.
			deadline := time.Now().Add(30 * time.Second)
			for {
				resp, err := http.Get("http://127.0.0.1:" + port + "/")
				if err == nil {
					resp.Body.Close()
					break
				}
				if time.Now().After(deadline) {
					out, _ := os.ReadFile(log.Name())
					t.Fatalf("idemgen ui did not serve within 30s: %v\n%s", err, out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			kids := childrenOf(t, parent.Process.Pid)
			if len(kids) != 1 {
				t.Fatalf("idemgen ui has children %v; want its database child", kids)
			}

			if err := parent.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				t.Logf("idemgen ended on %s: %v", sig, err) // an error: killed by the signal, as it should be
			case <-time.After(20 * time.Second):
				t.Fatalf("idemgen did not end within 20s of %s", sig)
			}
			// The child ends within the bound (a SIGKILLed parent's by the
			// parent-death signal), and the port is free.
			deadline = time.Now().Add(15 * time.Second)
			for alive(kids[0]) {
				if time.Now().After(deadline) {
					_ = syscall.Kill(kids[0], syscall.SIGKILL)
					t.Fatalf("the database child %d outlived idemgen by 15s after %s", kids[0], sig)
				}
				time.Sleep(20 * time.Millisecond)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Fatalf("the port is still held after idemgen and its child ended: %v", err)
			}
			ln.Close()
		})
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			kids = append(kids, kid)
		}
	}
	return kids
}

// alive reports whether pid is a process that has not ended (a zombie,
// ended and not yet reaped, counts as ended).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// fakeSQLCEnv names the directory where the fake sqlc child (this test
// binary, TestMain) says it started (PID.ready) and which signal reached
// it (PID.got).
const fakeSQLCEnv = "IDEMGEN_TEST_FAKE_SQLC"

// fakeSQLCChild stands in for the sqlc child: it says it started, waits
// up to a minute for an interrupt or a SIGTERM, writes which came, and ends.
func fakeSQLCChild(dir string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	pid := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, pid+".ready"), nil, 0o644); err != nil {
		return 3
	}
	select {
	case sig := <-sigs:
		_ = os.WriteFile(filepath.Join(dir, pid+".got"), []byte(sig.String()), 0o644)
		return 1
	case <-time.After(time.Minute):
		return 4
	}
}

// generate runs sqlc in a child. However idemgen is stopped (a
// supervisor's SIGTERM, an interrupt, a SIGKILL), the sqlc child ends
// with it: passed the signal that stopped idemgen, or SIGTERM by the
// parent-death signal when idemgen is killed outright.
func TestSQLCChildStopsWithIdemgen(t *testing.T) {
	dir := t.TempDir()
	idemgen := filepath.Join(dir, "idemgen")
	if out, err := exec.Command("go", "build", "-o", idemgen, "github.com/idemgen/idemgen/cmd/idemgen").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	svc := filepath.Join(dir, "svc")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(svc, "go.mod"), []byte("module example.com/svc\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	initCmd := exec.Command(idemgen, "init", "./jobs")
	initCmd.Dir = svc
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("idemgen init: %v\n%s", err, out)
	}

	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM: "terminated", syscall.SIGINT: "interrupt", syscall.SIGKILL: "terminated",
	} {
		t.Run(sig.String(), func(t *testing.T) {
			said := t.TempDir()
			log, err := os.Create(filepath.Join(t.TempDir(), "generate.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			parent := exec.Command(idemgen, "generate", "-f", "jobs/idemgen.yaml")
			parent.Dir = svc
			parent.Env = append(os.Environ(), generator.SQLCExeEnv+"="+os.Args[0], fakeSQLCEnv+"="+said)
			parent.Stdout, parent.Stderr = log, log
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- parent.Wait() }()
			defer func() { _ = parent.Process.Kill() }()

			var ready []string
			for deadline := time.Now().Add(30 * time.Second); len(ready) == 0; time.Sleep(20 * time.Millisecond) {
				if ready, err = filepath.Glob(filepath.Join(said, "*.ready")); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					out, _ := os.ReadFile(log.Name())
					t.Fatalf("generate started no sqlc child within 30s:\n%s", out)
				}
			}
			if err := parent.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				t.Logf("idemgen generate ended on %s: %v", sig, err)
			case <-time.After(20 * time.Second):
				t.Fatalf("idemgen generate did not end within 20s of %s", sig)
			}
			// Every sqlc child that started was passed the signal, and ended.
			ready, _ = filepath.Glob(filepath.Join(said, "*.ready"))
			for _, r := range ready {
				pid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(r), ".ready"))
				if err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(15 * time.Second)
				for alive(pid) {
					if time.Now().After(deadline) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
						t.Fatalf("the sqlc child %d outlived idemgen by 15s after %s", pid, sig)
					}
					time.Sleep(20 * time.Millisecond)
				}
				got, err := os.ReadFile(strings.TrimSuffix(r, ".ready") + ".got")
				if err != nil || string(got) != want {
					t.Errorf("the sqlc child %d got %q (%v) after idemgen got %s; want %q", pid, got, err, sig, want)
				}
			}
		})
	}
}
