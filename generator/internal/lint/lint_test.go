package lint_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/generator/internal/lint"
)

func TestAnalyzers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		analyzer *analysis.Analyzer
		fixes    bool // compare each package's fixed files with their .golden
		pkgs     []string
	}{
		// The facts of a generated package: units with their key fields,
		// effects, adapters and jobs, and nothing hand-written.
		{"facts", lint.API, false, []string{"gen/billing"}},
		{"effectkey", lint.EffectKey, true, []string{"effectkey"}},
		// An implementation in the generated package itself, in a file of
		// the user's next to the generated ones.
		{"effectkey beside generated", lint.EffectKey, false, []string{"genlocal"}},
		{"effectresult", lint.EffectResult, true, []string{"effectresult"}},
		{"unitkey", lint.UnitKey, false, []string{"unitkey"}},
		{"processresult", lint.ProcessResult, false, []string{"processresult"}},
		// A service's imports of the test packages, but not its test's, nor
		// one test package's of another.
		{"testonly", lint.TestOnly, false, []string{"testonly", "github.com/idemgen/idemgen/idem/crashsim"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fixes {
				analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), tc.analyzer, tc.pkgs...)
			} else {
				analysistest.Run(t, analysistest.TestData(), tc.analyzer, tc.pkgs...)
			}
		})
	}
}
