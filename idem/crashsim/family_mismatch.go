package crashsim

import "context"

type mismatchFamily[U any] struct{ baseFamily[U] }

func (*mismatchFamily[U]) about() familyAbout {
	return familyAbout{name: "mismatch", guarantees: []int{7},
		what: "a handed-in key delivered again with one field changed, each field in turn"}
}

// plan: once, for handed-in units.
func (*mismatchFamily[U]) plan(d *discovery[U]) []simScenario {
	if d.job.Source != SourceNoneName {
		return nil
	}
	return []simScenario{newScenario("mismatch")}
}

func (*mismatchFamily[U]) exactCalls(simScenario) bool { return true }

func (*mismatchFamily[U]) checkEnd(ctx context.Context, r *simRun[U], exp simExpect[U]) {
	r.checkMismatch(ctx, exp)
}
