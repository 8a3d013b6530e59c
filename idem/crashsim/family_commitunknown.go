package crashsim

import "github.com/idemgen/idemgen/idem/idemrt"

type commitunknownFamily[U any] struct{ baseFamily[U] }

func (*commitunknownFamily[U]) about() familyAbout {
	return familyAbout{name: "commitunknown", guarantees: []int{1, 2, 3},
		what: "a commit succeeds but the client sees an error"}
}

// plan: after every unit's commit and every progress save.
func (*commitunknownFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for k, h := range d.trace {
		if h.p == idemrt.PointUnitAfterCommit || h.p == idemrt.PointProgressAfter {
			plan = append(plan, at("commitunknown", k))
		}
	}
	return plan
}
