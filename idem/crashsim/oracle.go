package crashsim

// The crash simulation's oracle: what a job must have done, computed from
// the spec's semantics over the fixture's history, independently of the
// generated code. Keys are rendered here from the spec's key templates,
// field values are read by reflection, rows are compared as canonical
// JSON: a bug in a generated key function, in the payload encoding or in
// the SQL cannot make the model agree with it by construction.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Field describes one unit field as the spec declares it.
type Field struct {
	Name     string // snake_case, the JSON name
	Type     string // string int32 int64 float64 bool time bytes json uuid
	Nullable bool
	InKey    bool // a placeholder of the unit key
}

// oracleKey renders template for u the way docs/spec.md defines keys: literal
// text, field values, {sha256(a,b)} over length-prefixed values, and, where
// two placeholders are separated by literal text, values escaped for the
// separator bytes so rendering is injective. vars holds {version} and
// {job_version}.
func oracleKey(template string, vars map[string]string, u any) string {
	type part struct {
		lit    string
		field  string
		sha256 []string
		isLit  bool
	}
	var parts []part
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{lit: lit.String(), isLit: true})
			lit.Reset()
		}
	}
	rest := template
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			lit.WriteString(rest)
			break
		}
		lit.WriteString(rest[:open])
		end := strings.IndexByte(rest[open:], '}')
		name := strings.TrimSpace(rest[open+1 : open+end])
		rest = rest[open+end+1:]
		if v, ok := vars[name]; ok {
			lit.WriteString(v)
			continue
		}
		flush()
		if args, ok := strings.CutPrefix(name, "sha256("); ok {
			var p part
			for _, a := range strings.Split(strings.TrimSuffix(args, ")"), ",") {
				p.sha256 = append(p.sha256, strings.TrimSpace(a))
			}
			parts = append(parts, p)
			continue
		}
		parts = append(parts, part{field: name})
	}
	flush()
	seps := "" // separator characters: docs/spec.md escapes characters, not bytes
	for i, p := range parts {
		if !p.isLit || i == 0 || i == len(parts)-1 {
			continue
		}
		for _, c := range p.lit {
			alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if !alnum && !strings.ContainsRune(seps, c) {
				seps += string(c)
			}
		}
	}
	var out strings.Builder
	for _, p := range parts {
		switch {
		case p.isLit:
			out.WriteString(p.lit)
		case p.sha256 != nil:
			h := sha256.New()
			for _, f := range p.sha256 {
				v := oracleFieldText(u, f)
				h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(v))))
				h.Write([]byte(v))
			}
			out.WriteString(hex.EncodeToString(h.Sum(nil)))
		default:
			v := oracleFieldText(u, p.field)
			if seps == "" {
				out.WriteString(v)
				continue
			}
			for rest := v; rest != ""; {
				c, n := utf8.DecodeRuneInString(rest)
				sep := n > 1 || c != utf8.RuneError // an invalid byte is no separator
				if c == '%' || sep && strings.ContainsRune(seps, c) {
					for _, b := range []byte(rest[:n]) {
						fmt.Fprintf(&out, "%%%02X", b)
					}
				} else {
					out.WriteString(rest[:n])
				}
				rest = rest[n:]
			}
		}
	}
	return out.String()
}

// oracleField finds a unit field by its JSON name.
func oracleField(u any, name string) reflect.Value {
	v := reflect.ValueOf(u)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface { // a *any under Run (erase.go)
		v = v.Elem()
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag == name {
			return v.Field(i)
		}
	}
	panic(fmt.Sprintf("crashsim: unit %s has no field %q", t, name))
}

// oracleFieldText renders one field value as key text (docs/spec.md: times in
// UTC RFC 3339, bytes in hex, a null as the empty string).
func oracleFieldText(u any, name string) string {
	v := oracleField(u, name)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case json.RawMessage:
		return string(x)
	case []byte:
		return hex.EncodeToString(x)
	case fmt.Stringer:
		return x.String()
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	panic(fmt.Sprintf("crashsim: field %q has an unexpected kind %s", name, v.Kind()))
}

// oracleCompare orders two values of a newer_wins field.
func oracleCompare(a, b any, name string) int {
	x, y := oracleField(a, name), oracleField(b, name)
	if x.Kind() == reflect.Pointer {
		x, y = x.Elem(), y.Elem()
	}
	switch xv := x.Interface().(type) {
	case time.Time:
		return xv.Compare(y.Interface().(time.Time))
	}
	switch x.Kind() {
	case reflect.Int32, reflect.Int64:
		return cmpInt(x.Int(), y.Int())
	case reflect.Float64:
		return cmpInt(x.Float(), y.Float())
	case reflect.String:
		return strings.Compare(x.String(), y.String())
	}
	panic(fmt.Sprintf("crashsim: newer_wins field %q of kind %s", name, x.Kind()))
}

func cmpInt[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// oracleJSON is a unit as canonical JSON: every time in UTC, so equal
// instants compare equal whatever zone a database hands back.
func oracleJSON(u any) string {
	b, err := json.Marshal(u)
	if err != nil {
		panic(err)
	}
	if c, ok := oracleJSONCache.get(string(b)); ok {
		return c
	}
	c := canonicalJSON(b)
	oracleJSONCache.put(string(b), c)
	return c
}

// oracleJSONCache keeps canonicalJSON's answers: the oracle compares the
// same few units and rows at every check, and decoding and encoding them
// again was a tenth of a SQLite matrix's CPU.
var oracleJSONCache = jsonCache{m: map[string]string{}}

type jsonCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *jsonCache) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *jsonCache) put(k, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= 1<<16 {
		clear(c.m) // a bound on a long test's memory; the next checks fill it again
	}
	c.m[k] = v
}

// canonicalJSON re-encodes b with every time in UTC.
func canonicalJSON(b []byte) string {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		panic(err)
	}
	for k, v := range m {
		if s, ok := v.(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				m[k] = t.UTC().Format(time.RFC3339Nano)
			}
		}
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// oracleVary returns u with one field changed to another value of its
// type, for the one-field-at-a-time mismatch family.
func oracleVary[U any](u U, f Field) U {
	fields, store := settableUnit(&u)
	varyField(oracleField(fields.Addr().Interface(), f.Name), f.Name)
	store()
	return u
}

// settableUnit returns *u's struct, settable, and a function that stores
// it back in *u. Under Run, U is any (erase.go): *u then holds its struct
// in an interface, whose content cannot be set in place.
func settableUnit[U any](u *U) (reflect.Value, func()) {
	v := reflect.ValueOf(u).Elem()
	if v.Kind() != reflect.Interface {
		return v, func() {}
	}
	c := reflect.New(v.Elem().Type()).Elem()
	c.Set(v.Elem())
	return c, func() { v.Set(c) }
}

// varyField sets v, the unit field name, to another value of its type.
func varyField(v reflect.Value, name string) {
	if v.Kind() == reflect.Pointer {
		// A fresh value: the pointee is shared with the original unit.
		n := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			n.Elem().Set(v.Elem())
		}
		v.Set(n)
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Time:
		v.Set(reflect.ValueOf(x.Add(time.Second)))
		return
	case json.RawMessage:
		v.Set(reflect.ValueOf(json.RawMessage(`{"varied": true}`)))
		return
	case []byte:
		v.Set(reflect.ValueOf(append(slices.Clone(x), 0xff)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "~")
	case reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.5)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Array: // uuid
		v.Index(15).SetUint(v.Index(15).Uint() ^ 0xff)
	default:
		panic(fmt.Sprintf("crashsim: cannot vary field %q of kind %s", name, v.Kind()))
	}
}

// KeyText is the fixture's value of a string key field for unit id:
// adversarial on purpose. Units 2 to 4 carry the key's separators, '%',
// unicode and a long string; units 5 and 6 split the same text differently
// across two key fields, so a key that concatenates without escaping, or a
// content hash without lengths, renders them the same.
func KeyText(template, field string, id int) string {
	var fields []string // placeholders in order, sha256 arguments flattened
	sep := ""
	rest := template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			break
		}
		if len(fields) > 0 && sep == "" {
			for _, c := range rest[:open] {
				if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
					sep = string(c)
					break
				}
			}
		}
		end := strings.IndexByte(rest[open:], '}')
		name := strings.TrimSpace(rest[open+1 : open+end])
		rest = rest[open+end+1:]
		if args, ok := strings.CutPrefix(name, "sha256("); ok {
			for _, a := range strings.Split(strings.TrimSuffix(args, ")"), ",") {
				fields = append(fields, strings.TrimSpace(a))
			}
			continue
		}
		fields = append(fields, name)
	}
	if sep == "" {
		sep = ":"
	}
	switch pos := slices.Index(fields, field); id {
	case 2:
		return field + sep + "2" + sep + "%3A%" + sep
	case 3:
		return "ünïcødé-✓-" + field + "-3"
	case 4:
		return field + "-4-" + strings.Repeat("long", 60)
	case 5, 6:
		// Unit 5 is ("ab:", "c"), unit 6 is ("ab", ":c"), field by field.
		switch {
		case pos == 0 && id == 5:
			return "ab" + sep
		case pos == 0:
			return "ab"
		case pos == 1 && id == 5:
			return "c"
		case pos == 1:
			return sep + "c"
		}
		return field + "-56"
	}
	return fmt.Sprintf("%s-%d", field, id)
}

// simVersions are the job and effect versions a job is built with: the
// spec's, or bumped as a regenerated package would be.
type simVersions struct {
	job     int32
	effects []int32
}

func baseVersions[U any](j *Job[U]) simVersions {
	v := simVersions{job: j.Version}
	for _, fx := range j.Effects {
		v.effects = append(v.effects, fx.Version)
	}
	return v
}

// bumped returns v with effect bump-1 (or, for bump -1, the job) one
// version up.
func (v simVersions) bumped(bump int) simVersions {
	out := simVersions{job: v.job, effects: slices.Clone(v.effects)}
	if bump < 0 {
		out.job++
	} else {
		out.effects[bump-1]++
	}
	return out
}

// vars are the key variables under these versions.
func (v simVersions) vars(effect int) map[string]string {
	return map[string]string{"version": fmt.Sprint(v.effects[effect]), "job_version": fmt.Sprint(v.job)}
}

// editFor rebuilds a job definition with versions v, its effect keys
// rendered by the oracle; nil when they are the spec's.
func editFor[U any](v simVersions, j *Job[U]) func(*idemrt.Job[U]) {
	if slices.Equal(v.effects, baseVersions(j).effects) && v.job == j.Version {
		return nil
	}
	return func(d *idemrt.Job[U]) {
		d.Version = v.job
		for i := range d.Effects {
			tmpl, vars := j.Effects[i].Key, v.vars(i)
			d.Effects[i].Version = v.effects[i]
			d.Effects[i].KeyOf = func(u U) string { return oracleKey(tmpl, vars, u) }
		}
	}
}

// simDelivery is one unit version the world delivered, and the versions
// the job was built with when it was delivered.
type simDelivery[U any] struct {
	unit     U
	versions simVersions
}

// effectKey renders an effect's key under the versions in force.
func (r *simRun[U]) effectKey(fx Effect, u U) string {
	i := slices.IndexFunc(r.job.Effects, func(e Effect) bool { return e.Name == fx.Name })
	return oracleKey(fx.Key, r.versions.vars(i), u)
}

// simModel applies deliveries the way docs/guarantees.md says a job does, one at a
// time, and collects what it owes.
type simModel[U any] struct {
	job     *Job[U]
	rows    map[string]U
	seen    map[string]string // handed-in keys: the payload first seen
	order   []string
	owed    map[string]bool           // effect keys owed
	decided map[string]map[int32]bool // effect + unit key -> effect versions decided
}

func newSimModel[U any](job *Job[U]) *simModel[U] {
	return &simModel[U]{job: job, rows: map[string]U{}, seen: map[string]string{}, owed: map[string]bool{}, decided: map[string]map[int32]bool{}}
}

// apply processes one delivered version and returns its outcome and the
// effect keys it decides.
func (m *simModel[U]) apply(d simDelivery[U]) (idem.Outcome, []string) {
	u, key := d.unit, m.job.keyOf(d.unit)
	outcome := idem.OutcomeAccepted
	if m.job.Source == SourceNoneName {
		if prev, ok := m.seen[key]; ok {
			if prev != oracleJSON(u) {
				return idem.OutcomeMismatch, nil
			}
			outcome = idem.OutcomeDeduped
		} else {
			m.seen[key] = oracleJSON(u)
		}
	}
	if m.job.HasDest && outcome != idem.OutcomeDeduped {
		cur, exists := m.rows[key]
		switch {
		case !exists:
			outcome = idem.OutcomeInserted
			m.order = append(m.order, key)
			m.rows[key] = u
		case m.job.InsertOnce:
			outcome = idem.OutcomeDeduped // the key was written once already
		case m.job.NewerWins != "" && oracleCompare(u, cur, m.job.NewerWins) < 0:
			outcome = idem.OutcomeUnchanged
		case oracleJSON(u) == oracleJSON(cur):
			outcome = idem.OutcomeUnchanged
		default:
			outcome = idem.OutcomeUpdated
			m.rows[key] = u
		}
	}
	var keys []string
	for i, fx := range m.job.Effects {
		id := fx.Name + "\x00" + key
		v := d.versions.effects[i]
		decide := fx.When.Matches(outcome)
		if !decide && outcome != idem.OutcomeDeduped {
			for was := range m.decided[id] {
				decide = decide || was < v
			}
		}
		if !decide {
			continue
		}
		if m.decided[id] == nil {
			m.decided[id] = map[int32]bool{}
		}
		m.decided[id][v] = true
		k := oracleKey(fx.Key, d.versions.vars(i), u)
		m.owed[k] = true
		keys = append(keys, k)
	}
	return outcome, keys
}
