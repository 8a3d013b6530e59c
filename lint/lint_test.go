package lint_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/lint"
)

// TestAPI checks the facts exported for a generated package: units with
// their key fields, effects, adapters and jobs, and nothing hand-written.
func TestAPI(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), lint.API, "gen/billing")
}

func TestEffectKey(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), lint.EffectKey, "effectkey")
}

// TestEffectKeyBesideGenerated: an implementation in the generated
// package itself (a file of the user's next to the generated ones).
func TestEffectKeyBesideGenerated(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), lint.EffectKey, "genlocal")
}

func TestEffectResult(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), lint.EffectResult, "effectresult")
}

func TestUnitKey(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), lint.UnitKey, "unitkey")
}

func TestProcessResult(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), lint.ProcessResult, "processresult")
}
