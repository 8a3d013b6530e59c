package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cluster is a throwaway PostgreSQL server the soak starts for itself, so
// that it can crash it (an immediate shutdown: no checkpoint, every session
// dropped, crash recovery from the WAL on the next start) without touching
// a server others use. It runs as the current user, or as "postgres" when
// the soak runs as root (PostgreSQL refuses to run as root).
type cluster struct {
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string // data directory, also the Unix socket's
	port int
	as   string // run the server as this user ("" for the current one)
}

// errNoPostgres says the soak cannot start a server of its own.
var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) found in /usr/lib/postgresql/*/bin or on PATH")

// findPostgresBin returns the directory of the newest initdb and pg_ctl.
func findPostgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errNoPostgres
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// startCluster creates a cluster in a new temporary directory and starts it
// on a free loopback port. stop removes it.
func startCluster(ctx context.Context) (*cluster, error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin}
	dir, err := os.MkdirTemp("", "idemgen-soak-pg-")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.as = "postgres"
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if c.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if out, err := c.run(ctx, 2*time.Minute, "initdb", "-D", dir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := c.start(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// url is the cluster's database, over TCP on loopback.
func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// start starts the server and waits (at most a minute) until it accepts
// connections; after a crash that includes crash recovery.
func (c *cluster) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", c.port, c.dir)
	if out, err := c.run(ctx, 90*time.Second, "pg_ctl", "-D", c.dir, "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s", err, out)
	}
	return nil
}

// crash stops the server with an immediate shutdown: every backend is
// killed at once, nothing is checkpointed, and the next start recovers
// from the WAL as after a power cut of the server process.
func (c *cluster) crash(ctx context.Context) error {
	if out, err := c.run(ctx, 60*time.Second, "pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "-t", "30", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w\n%s", err, out)
	}
	return nil
}

// stop shuts the server down (fast, else immediate) and removes its directory.
func (c *cluster) stop() {
	ctx := context.Background()
	if _, err := c.run(ctx, 30*time.Second, "pg_ctl", "-D", c.dir, "-m", "fast", "-w", "-t", "20", "stop"); err != nil {
		_, _ = c.run(ctx, 30*time.Second, "pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "-t", "20", "stop")
	}
	_ = os.RemoveAll(c.dir)
}

// run runs one of the cluster's binaries, as c.as when set, within limit.
func (c *cluster) run(ctx context.Context, limit time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.as != "" {
		cmd = exec.CommandContext(ctx, runuser(), append([]string{"-u", c.as, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = os.TempDir() // a directory the server's user can enter
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return out, err
}

// runuser finds runuser(1): on PATH, else where Debian keeps it
// (/usr/sbin), which a PATH of /usr/bin:/bin alone misses.
func runuser() string {
	if p, err := exec.LookPath("runuser"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/runuser", "/sbin/runuser"} {
		if isExec(p) {
			return p
		}
	}
	return "runuser"
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serverLogTail is the end of the server's log, for a failed start.
func (c *cluster) serverLogTail() string {
	b, err := os.ReadFile(filepath.Join(c.dir, "server.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
