// Package billing is the user's package that idemgen generates into; this
// file is theirs (no header), so nothing in it is taken for generated.
package billing

// Audit looks like an effect but is hand-written: not an effect interface.
type Audit interface {
	Audit(key string) error
}
