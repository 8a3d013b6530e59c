package generator

import (
	"golang.org/x/tools/go/analysis"

	"github.com/idemgen/idemgen/generator/internal/lint"
)

// Analyzers are the checks of idemgen lint, in the order its help lists
// them: the Go code around generated packages (effect implementations that
// drop or rewrite their idempotency key or drop the provider's error, unit
// keys made from the clock or randomness, dropped Process results). They
// also run under go vet -vettool=$(which idemgen).
func Analyzers() []*analysis.Analyzer { return lint.Analyzers }
