package cli

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"unicode"
)

//go:embed starter/*.tmpl
var starterFS embed.FS

var starter = template.Must(template.ParseFS(starterFS, "starter/*.tmpl"))

// starterFiles are the files init writes, each from starter/NAME.tmpl.
// Both are the user's from then on; generated files come from generate.
var starterFiles = []string{"idemgen.yaml", "generate.go"}

func runInit(e Env, args []string) int {
	pos, code, ok := ParseFlags(e, "init", args, 1, nil)
	if !ok {
		return code
	}
	dir := "."
	if len(pos) == 1 {
		dir = pos[0]
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen init: %v\n", err)
		return ExitFail
	}
	files, err := starterContents(packageName(filepath.Base(abs)))
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen init: %v\n", err)
		return ExitFail
	}
	// Check both before writing either, so a refusal leaves dir as it was.
	var exists []string
	for _, name := range starterFiles {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			exists = append(exists, filepath.Join(dir, name))
		}
	}
	if len(exists) > 0 {
		verb := "exists"
		if len(exists) > 1 {
			verb = "exist"
		}
		fmt.Fprintf(e.Stderr, "idemgen init: %s already %s; init never overwrites files\n", strings.Join(exists, " and "), verb)
		return ExitFail
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(e.Stderr, "idemgen init: %v\n", err)
		return ExitFail
	}
	for _, name := range starterFiles {
		p := filepath.Join(dir, name)
		// O_EXCL: a file that appeared since the check is still not overwritten.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.Write(files[name])
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen init: %v\n", err)
			return ExitFail
		}
		fmt.Fprintf(e.Stdout, "wrote %s\n", p)
	}
	return ExitOK
}

// starterContents renders the starter files for package pkg.
func starterContents(pkg string) (map[string][]byte, error) {
	data := struct{ Package, PackagePad string }{
		Package:    pkg,
		PackagePad: strings.Repeat(" ", max(1, 34-len("package: "+pkg))),
	}
	out := map[string][]byte{}
	for _, name := range starterFiles {
		var b bytes.Buffer
		if err := starter.ExecuteTemplate(&b, name+".tmpl", data); err != nil {
			return nil, err
		}
		out[name] = b.Bytes()
	}
	return out, nil
}

// packageName turns a directory name into a Go package name the way people
// name packages: lower case letters and digits only. Names that cannot be
// a package (empty, a keyword, main) become "jobs".
func packageName(base string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		}
	}
	name := b.String()
	if name != "" && unicode.IsDigit(rune(name[0])) {
		name = "p" + name
	}
	if name == "" || name == "main" || token.IsKeyword(name) {
		return "jobs"
	}
	return name
}
