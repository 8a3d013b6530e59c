package schema

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// Validate checks a spec's YAML against the schema, as an editor does:
// structure only (see the package comment). The error names the place of
// each finding ("at '/jobs/1/effects/0/circuit': additional properties
// 'max_cool_down' not allowed").
func Validate(spec []byte) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	inst, err := instance(spec)
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// compiled is the schema, compiled once.
var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSON()))
	if err != nil {
		return nil, fmt.Errorf("%s is not JSON: %w", FileName, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(ID, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(ID)
	if err != nil {
		return nil, fmt.Errorf("%s does not compile: %w", FileName, err)
	}
	return sch, nil
})

// instance turns YAML into the JSON value an editor would validate.
func instance(data []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return jsonValue(v), nil
}

func jsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = jsonValue(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[fmt.Sprint(k)] = jsonValue(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = jsonValue(x)
		}
		return out
	case time.Time:
		return v.Format(time.RFC3339Nano)
	}
	return v
}
