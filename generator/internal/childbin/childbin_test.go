package childbin

import (
	"bytes"
	"testing"
)

// go mod tidy after a first generate moves requirements between the direct
// and the indirect block: the children generate built stay current. A
// changed version or replacement is another child.
func TestBuildLinesIgnoreLayout(t *testing.T) {
	before := "module example.com/svc\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/idemgen/idemgen v0.4.0 // indirect\n" +
		"\tgithub.com/jackc/pgx/v5 v5.12.0 // indirect\n)\n\ntool github.com/idemgen/idemgen/cmd/idemgen\n"
	tidied := "module example.com/svc\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/jackc/pgx/v5 v5.12.0\n" +
		"\tgithub.com/idemgen/idemgen v0.4.0\n)\n\ntool github.com/idemgen/idemgen/cmd/idemgen\n"
	if !bytes.Equal(buildLines([]byte(before)), buildLines([]byte(tidied))) {
		t.Errorf("a tidied go.mod is another child:\n%s\n%s", buildLines([]byte(before)), buildLines([]byte(tidied)))
	}
	for _, other := range []string{
		tidied + "replace github.com/jackc/pgx/v5 => ../pgx\n",
		tidied[:len(tidied)-len("tool github.com/idemgen/idemgen/cmd/idemgen\n")] + "require github.com/jackc/pgx/v5 v5.13.0\n",
		"module example.com/svc\n\ngo 1.27.0\n",
	} {
		if bytes.Equal(buildLines([]byte(before)), buildLines([]byte(other))) {
			t.Errorf("%q is the same child as %q", other, before)
		}
	}
}
