package generator

import (
	"context"
	"io"

	"github.com/idemgen/idemgen/generator/internal/sqlc"
)

// The sqlc child. Generate needs sqlc (Options.SQLC), which idemgen never
// runs in its own process: sqlc exits the process on errors and is not safe
// for concurrent use. The idemgen command links no sqlc; it builds a
// binary that does, the sqlc child, once (SQLCChild). A binary that links
// sqlc itself (LinkSQLC: test binaries) is its own sqlc child: its main,
// or TestMain, must first hand the process to SQLCMain when IsSQLCChild.
// The idemgen command's package imports no sqlc under any build tag: go mod
// tidy reads every tag's imports, and sqlc's would bring its whole module
// graph (the MySQL driver, gRPC, ...) into every service's go.mod.

// SQLCExeEnv names a binary that links sqlc (the sqlc child, package
// github.com/idemgen/idemgen/generator/internal/sqlc/child) for SQLCChild
// to use as it is.
const SQLCExeEnv = sqlc.ExeEnv

// IsSQLCChild reports whether this process was started as the sqlc child.
func IsSQLCChild() bool { return sqlc.IsChild() }

// SQLCMain runs sqlc's command line with args in the sqlc child and
// returns its exit code.
func SQLCMain(args []string) int { return sqlc.Main(args) }

// LinkSQLC makes this binary its own sqlc child: run is sqlc's command
// line (github.com/sqlc-dev/sqlc/pkg/cli.Run). Call it from an init.
func LinkSQLC(run func(args []string) int) { sqlc.Link(run) }

// SQLCChild returns an SQLC that runs the sqlc child: the binary named by
// SQLCExeEnv, else this one if it links sqlc, else the sqlc child built
// with the go command in moduleDir (the spec's module, which requires
// idemgen) the first time it is needed and kept in the user's cache
// directory. Building it is said on stderr.
func SQLCChild(ctx context.Context, stderr io.Writer, moduleDir string) (SQLC, error) {
	return sqlc.Child(ctx, stderr, moduleDir)
}

// SQLCExe returns an SQLC that runs exe, a binary that links sqlc, as the
// sqlc child: a test binary passes its own os.Args[0].
func SQLCExe(exe string) SQLC { return sqlc.Runner{Exe: exe} }

// BuildSQLCChild builds the sqlc child into exe with the go command in
// moduleDir's module ("": the current directory's), as SQLCChild builds it.
func BuildSQLCChild(ctx context.Context, stderr io.Writer, moduleDir, exe string) error {
	return sqlc.BuildChild(ctx, stderr, moduleDir, sqlc.ChildPackage, exe)
}
