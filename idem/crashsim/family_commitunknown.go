package crashsim

import (
	"errors"

	"github.com/idemgen/idemgen/idem/idemtest"
)

type commitunknownFamily[U any] struct{ baseFamily[U] }

func (*commitunknownFamily[U]) about() familyAbout {
	return familyAbout{name: "commitunknown", guarantees: []int{1, 2, 3},
		what: "a commit succeeds but the client sees an error"}
}

// plan: after every unit's commit and every progress save.
func (*commitunknownFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for k, h := range d.trace {
		if h.p == idemtest.PointUnitAfterCommit || h.p == idemtest.PointProgressAfter {
			plan = append(plan, at("commitunknown", k))
		}
	}
	return plan
}

// faultAt: the scenario's commit succeeds, and the client sees an error.
func (*commitunknownFamily[U]) faultAt(r *simRun[U], n int, _ simHit) error {
	if n == r.sc.at {
		return errors.New("simulated: the commit succeeded but the client saw an error")
	}
	return nil
}

func (*commitunknownFamily[U]) exactCalls(simScenario) bool { return true }

func (*commitunknownFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFailedWrite(r, e) }
