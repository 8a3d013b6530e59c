package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Outside a module, status and ledger cannot build their database child:
// they say so, and how to give them one, instead of running go build.
func TestOpsOutsideAModuleSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "idemgen.yaml"), []byte(goodSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv(OpsExeEnv, "")
	for _, args := range [][]string{{"status", "-db", "x.db"}, {"ledger", "-db", "x.db", "list"}} {
		code, _, errOut := run(t, args...)
		if code != ExitUsage || !strings.Contains(errOut, "no go.mod at or above") || !strings.Contains(errOut, OpsExeEnv) {
			t.Errorf("idemgen %s = %d, %q; want %d, no go.mod, and %s", strings.Join(args, " "), code, errOut, ExitUsage, OpsExeEnv)
		}
	}
}
