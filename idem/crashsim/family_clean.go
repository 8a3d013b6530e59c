package crashsim

type cleanFamily[U any] struct{ baseFamily[U] }

func (*cleanFamily[U]) about() familyAbout {
	return familyAbout{name: "clean", guarantees: []int{1, 2, 4},
		what: "the fixture with no fault; report counts checked"}
}
