package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// coldBuild is the first build a service pays (issue 23, item 4): a new
// module takes idemgen as a tool (go get -tool, this checkout standing in
// for the published module), writes the starter spec, and then runs
// `go tool idemgen generate` with an empty build cache and an empty user
// cache directory, so it compiles idemgen, then builds its sqlc child.
type coldBuild struct {
	wall, cpu time.Duration // the generate command's, its children's included
	tool      time.Duration // until idemgen said it builds its sqlc child: the go command building idemgen
	lean      bool          // the sqlc child was built lean
	childSize int64
}

// coldBuildTarget is the bound on the wall time, in seconds.
const coldBuildTarget = 60

func measureColdBuild(ctx context.Context) (*coldBuild, error) {
	root, err := repoRoot(ctx)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "idemgen-coldbuild-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	svc := filepath.Join(work, "svc")
	if err := os.Mkdir(svc, 0o755); err != nil {
		return nil, err
	}
	// The checksum database may be unreachable, and a proxy may answer 403
	// for the unpublished idemgen: each proxy is asked, then "off", whose
	// "not found" sends go to the replacement.
	env := append(os.Environ(), "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOPROXY="+toolProxy(ctx))
	steps := [][]string{
		{"go", "mod", "init", "example.com/coldsvc"},
		{"go", "mod", "edit", "-replace=github.com/idemgen/idemgen=" + root},
		{"go", "get", "-tool", "github.com/idemgen/idemgen/cmd/idemgen"},
		{"go", "tool", "idemgen", "init", "./jobs"},
	}
	for _, s := range steps {
		if _, err := runIn(ctx, svc, env, s...); err != nil {
			return nil, err
		}
	}

	caches := filepath.Join(work, "caches")
	cold := append(env, "GOCACHE="+filepath.Join(caches, "go"), "XDG_CACHE_HOME="+filepath.Join(caches, "user"), "IDEMGEN_SQLC_EXE=")
	cmd := exec.CommandContext(ctx, "go", "tool", "idemgen", "generate", "-f", "jobs/idemgen.yaml")
	cmd.Dir, cmd.Env = svc, cold
	start := time.Now()
	out := &markedBuffer{mark: "building its sqlc child", start: start}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go tool idemgen generate with empty caches: %v\n%s", err, out.String())
	}
	r := &coldBuild{
		wall: time.Since(start),
		tool: out.at,
		// wait4's usage counts the processes the go command waited for: the compiler, the linker, the sqlc child's build.
		cpu:  cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
		lean: !strings.Contains(out.String(), "building all of sqlc"),
	}
	children, _ := filepath.Glob(filepath.Join(caches, "user", "idemgen", "idemgen-sqlc-*"))
	for _, c := range children {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			r.childSize = fi.Size()
		}
	}
	if r.childSize == 0 {
		return nil, fmt.Errorf("generate left no sqlc child in the empty user cache directory:\n%s", out.String())
	}
	return r, nil
}

// markedBuffer keeps what is written to it and when mark first appeared
// (from start).
type markedBuffer struct {
	buf   bytes.Buffer // not embedded: io.Copy would write through its ReadFrom, past Write
	mark  string
	start time.Time
	at    time.Duration
}

func (b *markedBuffer) String() string { return b.buf.String() }

func (b *markedBuffer) Write(p []byte) (int, error) {
	n, err := b.buf.Write(p)
	if b.at == 0 && strings.Contains(b.buf.String(), b.mark) {
		b.at = time.Since(b.start)
	}
	return n, err
}

// repoRoot is the directory of this checkout's go.mod.
func repoRoot(ctx context.Context) (string, error) {
	out, err := runIn(ctx, "", nil, "go", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(out)
	if data, err := os.ReadFile(mod); err != nil || !bytes.HasPrefix(data, []byte("module github.com/idemgen/idemgen\n")) {
		return "", fmt.Errorf("run the cold build measurement inside the idemgen checkout (go env GOMOD says %q)", mod)
	}
	return filepath.Dir(mod), nil
}

// toolProxy is GOPROXY with every proxy asked in turn whatever it answers,
// then off.
func toolProxy(ctx context.Context) string {
	out, _ := runIn(ctx, "", nil, "go", "env", "GOPROXY")
	var proxies []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(out), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			proxies = append(proxies, p)
		}
	}
	return strings.Join(append(proxies, "off"), "|")
}

func runIn(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (c *coldBuild) target() target {
	return target{label: "coldbuild_s", value: c.wall.Seconds(), bound: coldBuildTarget, atMost: true, applies: true}
}

func (c *coldBuild) print(out io.Writer) {
	t := c.target()
	how := "lean"
	if !c.lean {
		how = "all of sqlc"
	}
	fmt.Fprintf(out, "\ncold build: go tool idemgen generate in a new module, empty build cache: %.1f s wall (idemgen built in %.1f s, then its sqlc child), %.1f s CPU (user+sys, its children's included); sqlc child %s, %.1f MiB   target %s\n",
		c.wall.Seconds(), c.tool.Seconds(), c.cpu.Seconds(), how, mib(c.childSize), t)
}
