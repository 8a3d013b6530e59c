package spec

import "testing"

// TestYAMLSyntaxErrorPosition pins where YAML syntax errors point: at the
// line and column of the problem, which yaml.v3's own messages miss (one
// line early for parser errors, the start of the token for scanner errors).
func TestYAMLSyntaxErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{"version: 1\njobs:\n  - name: x\n\t unit: {\n",
			"s.yaml:4:1: invalid YAML: found a tab character that violates indentation"},
		{"version: 1\npackage: billing\n  bad: 2\n",
			"s.yaml:3:6: invalid YAML: mapping values are not allowed in this context"},
		{"version: 1\njobs:\n  - name: x\n   unit: y\n",
			"s.yaml:4:4: invalid YAML: did not find expected '-' indicator"},
		{"version: 1\n\n\ndialects: [sqlite, postgres\npackage: billing\n",
			"s.yaml:4:12: invalid YAML: did not find expected ',' or ']'"},
		{"version: 1\n- package\n",
			"s.yaml:2:1: invalid YAML: did not find expected key"},
		{"version: 1\npackage: @billing\n",
			"s.yaml:2:10: invalid YAML: found character that cannot start any token"},
		{"package: 'billing\n",
			"s.yaml:1:10: invalid YAML: found unexpected end of stream"},
		{"doc: \"two\n  lines\"\npackage: a: b\n",
			"s.yaml:3:11: invalid YAML: mapping values are not allowed in this context"},
	} {
		_, ds := Parse("s.yaml", []byte(tc.yaml))
		if len(ds) != 1 || ds[0].String() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.yaml, ds, tc.want)
		}
	}
}
