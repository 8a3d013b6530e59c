package sqlc

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/childbin"
)

// The lean child. sqlc's command links every engine, its vet command, its
// plugin runtimes and its cloud client; idemgen's child needs two engines
// and the Go code generator. For the sqlc version the lean files were
// written against (LeanVersion), BuildChild builds the child from a copy
// of sqlc's module with a few files replaced or left out (leanEdits), given
// to the go command as a replace in a copy of the service's go.mod
// (-modfile), so the service's go.mod and go.sum stay untouched and every
// other module keeps the version the service selects. The copy leaves out
// the MySQL engine (TiDB's parser), ClickHouse's, the database analyzers
// (the SQLite driver, pgx), cel-go, wazero and gRPC: about half of what the
// child compiled. When the version or a file differs, the child is built
// from sqlc as it is.

// LeanVersion is the sqlc version whose files leanEdits knows.
const LeanVersion = "v1.31.1"

// SqlcModule is sqlc's module path.
const SqlcModule = "github.com/sqlc-dev/sqlc"

//go:embed lean/*.lean
var leanFiles embed.FS

// leanEdit is one file of sqlc's module the lean copy depends on: its
// slash path, the SHA-256 of its content in LeanVersion, and the file of
// lean/ that replaces it ("": the file is left out; "=": kept as it is,
// checked because the lean files call into it).
type leanEdit struct {
	path, sum, with string
}

var leanEdits = []leanEdit{
	{"internal/compiler/engine.go", "c5a79ad2317cd444a7472a60e3e09b767abc20fd0f6d71a9384f247cb072a2d7", "engine.go.lean"},
	{"internal/cmd/generate.go", "e881ddb593d2404b33f6f38d50dd96e9f8e63b42e03361822dd7943c1a32575d", "cmd.go.lean"},
	{"internal/cmd/cmd.go", "69b3dc8cda7961ce1d29e79c60112addc10b7529697ae76d5ee02ca9b61172cf", ""},
	{"internal/cmd/createdb.go", "bf47ecbcb885cbdbb9c237c9d425d8f8c999768858f6863096f4028514a962ae", ""},
	{"internal/cmd/diff.go", "8553a305d1aa72e123c1a1dc25093e92d7fef49420c3a5111be0437b82a8bc16", ""},
	{"internal/cmd/parse.go", "fb1cf6eccf8b42347eb70a736aeb77349268eb4ec5f1c11591e9e2ad44f831ba", ""},
	{"internal/cmd/push.go", "085a6d2827f97fc4b2b2baa84179c21182a0e6640f0acaaf566bb16b10be5101", ""},
	{"internal/cmd/verify.go", "0ec54c9e7e2beb36210d617fdfc42cfc00cb7a3d8d897930e5f325d0f8a18e05", ""},
	{"internal/cmd/vet.go", "c71df88edafe30f29b069db3ac5bfea7d83e0972463af276c4d8d1d5f17f6850", ""},
	{"internal/cmd/vet_sqlite.go", "79bb5858eabfd015a189522a640f3ee3d9d4441e5851887f6c62a604e363c703", ""},
	{"internal/plugin/codegen_grpc.pb.go", "38265c27a4516f0ebf1f4b203a407e594de340b4d0d637d45c02a7da187e7c28", ""},
	{"internal/rpc/errors.go", "0e1fe547db7d93235a91933991f51704af9414a873e561aec62e7900d32e6c64", "rpc.go.lean"},
	{"internal/rpc/interceptor.go", "6178c9af2339067b09ab8621ade489f41488b7bcbcfedef2227bb8f8ef52042d", ""},
	// Kept as they are; the lean files call into them.
	{"internal/cmd/process.go", "a71ed3a59988f611d6c509059b5b831f7e9623b72dd157f18873bb108e962180", "="},
	{"internal/cmd/shim.go", "31e45121a14150b7ef70e52089ae0fd156abd9390bb67452f1710581c00173b6", "="},
	{"internal/cmd/options.go", "dfef2412dd7db6d603f3c4e6ba5d6dff9024a903e86cd44e20a00588b85ae2b1", "="},
}

// sqlcModule is what `go list -m -json` says of sqlc in a module.
type sqlcModule struct {
	Version string
	Dir     string
	Replace *struct{ Path, Version string }
}

// leanModFile prepares, under work, a copy of sqlc's module with leanEdits
// applied and a copy of childMod (childModFile's go.mod, and its go.sum)
// that replaces sqlc with it, and returns that go.mod's path for go build
// -modfile. When the lean copy cannot be made for this sqlc, it returns ""
// and why.
func leanModFile(ctx context.Context, moduleDir, work, childMod string) (modFile, why string, err error) {
	m, why := listSqlc(ctx, moduleDir, childMod)
	if why != "" {
		return "", why, nil
	}
	switch {
	case m.Replace != nil:
		return "", "sqlc is replaced in go.mod", nil
	case m.Version != LeanVersion:
		return "", fmt.Sprintf("sqlc is %s, the lean build knows %s", m.Version, LeanVersion), nil
	}
	if m.Dir == "" {
		// Not in the module cache: the service's go.mod does not require
		// sqlc (idemgen's does), so go get -tool did not download it.
		if m.Dir, why = downloadSqlc(ctx, moduleDir, childMod, m.Version); why != "" {
			return "", why, nil
		}
	}
	if why := checkLeanSources(os.DirFS(m.Dir)); why != "" {
		return "", why, nil
	}
	copyDir, err := leanCopy(m.Dir)
	if err != nil {
		return "", "", err
	}
	goMod, err := os.ReadFile(childMod)
	if err != nil {
		return "", "", fmt.Errorf("sqlc: %w", err)
	}
	goMod = fmt.Appendf(goMod, "\nreplace %s => %s\n", SqlcModule, copyDir)
	goSum, err := os.ReadFile(sumFile(childMod))
	if err != nil {
		return "", "", fmt.Errorf("sqlc: %w", err)
	}
	modFile = filepath.Join(work, "lean.mod")
	if err := os.WriteFile(modFile, goMod, 0o644); err != nil {
		return "", "", fmt.Errorf("sqlc: %w", err)
	}
	if err := os.WriteFile(sumFile(modFile), goSum, 0o644); err != nil {
		return "", "", fmt.Errorf("sqlc: %w", err)
	}
	return modFile, "", nil
}

// listSqlc says what sqlc is in the build list of childMod, or why it
// cannot say.
func listSqlc(ctx context.Context, moduleDir, childMod string) (sqlcModule, string) {
	var m sqlcModule
	cmd := childbin.Command(ctx, "go", "list", "-modfile="+childMod, "-m", "-json", SqlcModule)
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err != nil {
		return m, fmt.Sprintf("go list -m %s: %v%s", SqlcModule, err, exitStderr(err))
	}
	return m, ""
}

// downloadSqlc puts sqlc's module of this version in the module cache and
// returns its directory, or why it could not.
func downloadSqlc(ctx context.Context, moduleDir, childMod, version string) (dir, why string) {
	cmd := childbin.Command(ctx, "go", "mod", "download", "-modfile="+childMod, "-json", SqlcModule+"@"+version)
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	switch {
	case err != nil:
		return "", fmt.Sprintf("go mod download %s@%s: %v%s", SqlcModule, version, err, exitStderr(err))
	case m.Error != "" || m.Dir == "":
		return "", fmt.Sprintf("go mod download %s@%s: %s", SqlcModule, version, m.Error)
	}
	return m.Dir, ""
}

// exitStderr is what a go command that failed said on stderr, after a colon.
func exitStderr(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(exit.Stderr))
	}
	return ""
}

// sumFile is the go.sum beside the go.mod named modFile.
func sumFile(modFile string) string { return strings.TrimSuffix(modFile, ".mod") + ".sum" }

// leanCopy returns the lean copy of sqlc's module at src, made once in
// idemgen's cache directory (childbin.Dir): the go command's build
// cache keys a package by its directory, so a copy made anew each time
// would be compiled anew each time.
func leanCopy(src string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, LeanVersion)
	for _, e := range leanEdits {
		fmt.Fprintln(h, e.path, e.sum, e.with)
		if e.with != "" && e.with != "=" {
			data, err := leanFiles.ReadFile("lean/" + e.with)
			if err != nil {
				return "", fmt.Errorf("sqlc: lean copy: %w", err)
			}
			h.Write(data)
		}
	}
	parent := childbin.Dir()
	dst := filepath.Join(parent, "sqlc-"+LeanVersion+"-lean-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.MkdirTemp(parent, ".sqlc-lean-*")
	if err != nil {
		return "", fmt.Errorf("sqlc: lean copy: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename
	if err := copyModule(src, tmp); err != nil {
		return "", fmt.Errorf("sqlc: lean copy: %w", err)
	}
	if err := applyLeanEdits(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, statErr := os.Stat(dst); statErr == nil {
			return dst, nil // another generate made it meanwhile
		}
		return "", fmt.Errorf("sqlc: lean copy: %w", err)
	}
	return dst, nil
}

// checkLeanSources says which file of sqlc's module differs from the one
// leanEdits was written against ("" if none does).
func checkLeanSources(mod fs.FS) string {
	for _, e := range leanEdits {
		data, err := fs.ReadFile(mod, e.path)
		if err != nil {
			return fmt.Sprintf("sqlc's %s: %v", e.path, err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != e.sum {
			return fmt.Sprintf("sqlc's %s is not the one the lean build knows", e.path)
		}
	}
	return ""
}

// applyLeanEdits replaces or removes leanEdits' files in a copy of sqlc's module.
func applyLeanEdits(dir string) error {
	for _, e := range leanEdits {
		p := filepath.Join(dir, filepath.FromSlash(e.path))
		switch e.with {
		case "=":
			continue
		case "":
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("sqlc: lean copy: %w", err)
			}
		default:
			data, err := leanFiles.ReadFile("lean/" + e.with)
			if err != nil {
				return fmt.Errorf("sqlc: lean copy: %w", err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return fmt.Errorf("sqlc: lean copy: %w", err)
			}
		}
	}
	return nil
}

// copyModule copies a module's source from the module cache (read-only)
// to dst, writable, without tests, test data, examples and docs.
func copyModule(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case rel != "." && (name == "testdata" || strings.HasPrefix(name, ".") || rel == "examples" || rel == "docs"):
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(p, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
