package crashsim

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem"
)

type fanoutFamily[U any] struct{ baseFamily[U] }

func (*fanoutFamily[U]) about() familyAbout {
	return familyAbout{name: "fanout", long: 700 * time.Millisecond, guarantees: []int{1, 2, 4},
		what: "effects four at a time over pipelined batches of two (a job without effects on PostgreSQL " +
			"writes ahead); report counts and calls checked"}
}

func (*fanoutFamily[U]) plan(*discovery[U]) []simScenario {
	return []simScenario{newScenario("fanout")}
}

func (*fanoutFamily[U]) options(*simRun[U]) []idem.Option { return fanoutOptions() }

// fanoutOptions: effects four at a time, batches of two: a batch's calls
// overlap the next batch's write and claim, and results are recorded in
// the background; a job without effects on PostgreSQL commits a batch
// while the next is written. A crash parks every goroutine of the process.
func fanoutOptions() []idem.Option {
	return []idem.Option{idem.WithEffectConcurrency(4), idem.WithBatchSize(2), idem.WithWriteAhead(true)}
}

func (*fanoutFamily[U]) exactCalls(simScenario) bool { return true }

// checkEnd: without a fault, concurrent calls are still one per key, and
// every run's report counts.
func (*fanoutFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	r.checkUnfaulted(ctx)
}
