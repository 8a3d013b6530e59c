package spec

// Check runs every semantic rule over a parsed spec: the mistakes `vet`
// reports and `generate` refuses. Warnings do not stop generation.
func Check(f *File) Diagnostics {
	r := &reporter{file: f.Name}
	checkFile(r, f)
	return r.diags.Sorted()
}

func checkFile(r *reporter, f *File) {
	if !f.Package.Set {
		r.errorf(Pos{1, 1}, "spec: missing package")
	}
}
