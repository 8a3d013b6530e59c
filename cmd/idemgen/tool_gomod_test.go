package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A service that takes idemgen as a tool gets in its go.mod what the
// tool's package imports under any build tag (go mod tidy reads them all),
// and nothing of sqlc: not sqlc's module, nor the MySQL driver, TiDB's
// parser or gRPC that only sqlc's graph brings. The sqlc child is built
// from idemgen's go.mod and go.sum (generator/internal/sqlc), not from the
// service's. A new module, tidied offline from the module cache, as go get
// -tool would leave it.
func TestToolGoModHasNoSqlc(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	svc := t.TempDir()
	goMod := "module example.com/svc\n\ngo 1.26.0\n\n" +
		"require github.com/idemgen/idemgen v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/idemgen/idemgen => " + root + "\n\n" +
		"tool github.com/idemgen/idemgen/cmd/idemgen\n"
	if err := os.WriteFile(filepath.Join(svc, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Offline: every module the tool's packages need is in the module
	// cache, since this checkout's own build needs it. Not every module the
	// tests of those packages' dependencies need (x/tools' tests import
	// go-cmp), which tidy also loads: -e goes on without them.
	cmd := exec.Command("go", "mod", "tidy", "-e")
	cmd.Dir = svc
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go mod tidy in a module with idemgen as its tool: %v\n%s", err, out)
	}
	t.Logf("go mod tidy -e:\n%s", out)
	data, err := os.ReadFile(filepath.Join(svc, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	indirect := strings.Count(string(data), "// indirect")
	for _, mod := range []string{"github.com/sqlc-dev/", "github.com/go-sql-driver/mysql", "github.com/pingcap/", "google.golang.org/grpc", "github.com/tetratelabs/wazero", "github.com/google/cel-go"} {
		if strings.Contains(string(data), "\t"+mod) {
			t.Errorf("a service's go.mod with idemgen as its tool requires %s (sqlc's graph):\n%s", mod, data)
		}
	}
	// The drivers and the runtime the database child and the generated
	// code need are there.
	for _, mod := range []string{"github.com/jackc/pgx/v5", "github.com/ncruces/go-sqlite3 ", "github.com/pressly/goose/v3"} {
		if !strings.Contains(string(data), "\t"+mod) {
			t.Errorf("a service's go.mod with idemgen as its tool lacks %s:\n%s", mod, data)
		}
	}
	t.Logf("%d indirect requirements", indirect)
}
