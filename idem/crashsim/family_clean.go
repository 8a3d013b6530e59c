package crashsim

import "context"

// famClean is the discovery run's family: Run plays it first, and every
// other family plans over its trace.
const famClean = "clean"

type cleanFamily[U any] struct{ baseFamily[U] }

func (*cleanFamily[U]) about() familyAbout {
	return familyAbout{name: famClean, guarantees: []int{1, 2, 4},
		what: "the fixture with no fault; report counts checked"}
}

func (*cleanFamily[U]) exactCalls(simScenario) bool { return true }

// checkEnd: every run's report counts, and (handed-in) a replay.
func (*cleanFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	r.checkUnfaulted(ctx)
}
