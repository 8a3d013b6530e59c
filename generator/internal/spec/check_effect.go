package spec

// The checks of an effect: its name, key, when, lease and timeout, retry
// and circuit.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

func (jc *jobCtx) effects(effectNames firstSeen, effectKeys map[string]string) {
	for i := range jc.j.Effects {
		jc.effect(&jc.j.Effects[i], i, effectNames, effectKeys)
	}
}

func (jc *jobCtx) effect(e *Effect, i int, effectNames firstSeen, effectKeys map[string]string) {
	prefix := fmt.Sprintf("%seffect #%d: ", jc.prefix, i+1)
	if e.Name.Value != "" {
		prefix = fmt.Sprintf("%seffect %q: ", jc.prefix, e.Name.Value)
	}
	switch n := e.Name; {
	case !n.Set && jc.givenBadly(e.Pos, "name"):
	case !n.Set || n.Value == "":
		jc.errorf(e.Pos, "%smissing name", prefix)
	case !snakeRe.MatchString(n.Value):
		jc.errorf(n.Pos, "%seffect name %q must be snake_case (lower-case letters, digits and _, starting with a letter)", jc.prefix, n.Value)
	case len(n.Value) > MaxNameLen:
		jc.errorf(n.Pos, "%seffect name %q is longer than %d characters", jc.prefix, n.Value, MaxNameLen)
	default:
		if first, dup := effectNames.repeat(n.Value, n.Pos); dup {
			jc.errorf(n.Pos, "%seffect name %q is repeated (first at line %d); effect names are unique across the spec", jc.prefix, n.Value, first.Line)
		} else if first, dup := effectNames.repeat(goName(n.Value), n.Pos); dup {
			jc.errorf(n.Pos, "%seffect name %q becomes the same Go name as the effect at line %d", jc.prefix, n.Value, first.Line)
		}
	}
	if v := e.Version; v.Set && v.Value < 1 {
		jc.errorf(v.Pos, "%sversion must be at least 1, not %d", prefix, v.Value)
	}
	if m := e.MaxAttempts; m.Set && m.Value < 1 {
		jc.errorf(m.Pos, "%smax_attempts must be at least 1, not %d", prefix, m.Value)
	}
	switch c := e.Concurrency; {
	case c.Set && c.Value < 1:
		jc.errorf(c.Pos, "%sconcurrency must be at least 1, not %d", prefix, c.Value)
	case c.Set && c.Value > math.MaxInt32:
		jc.errorf(c.Pos, "%sconcurrency must be at most %d, not %d", prefix, math.MaxInt32, c.Value)
	}
	jc.retry(e, prefix)
	jc.circuit(e, prefix)
	jc.publish(e, prefix)
	if w := e.When; w.Set {
		switch {
		case !slices.Contains(WhenValues, w.Value):
			jc.errorf(w.Pos, "%swhen %q is not one of %s%s", prefix, w.Value, strings.Join(WhenValues, ", "), didYouMean(w.Value, WhenValues))
		case w.Value != "always" && jc.j.Destination == nil:
			jc.errorf(w.Pos, "%swhen: %s needs a destination; without one nothing is %s (use when: always)", prefix, w.Value, w.Value)
		case w.Value == "changed" && jc.j.Destination.Write.Value == "insert_once":
			jc.warnf(w.Pos, "%swhen: changed with write: insert_once can only ever mean inserted", prefix)
		}
	}
	lease, leaseText := DefaultLease, "5m (the default)"
	if e.Lease.Set {
		lease, leaseText = e.Lease.Value, e.Lease.Text
	}
	// A lease the parser refused is not compared with anything.
	leaseKnown := e.Lease.Set || !jc.givenBadly(e.Pos, "lease")
	if r := e.Retention; r.Set && leaseKnown && r.Value < lease {
		jc.warnf(r.Pos, "%sretention %s is shorter than the lease %s; a purge could remove a row another run still relies on", prefix, r.Text, leaseText)
	}
	if t := e.Timeout; t.Set && leaseKnown && t.Value >= lease {
		jc.errorf(t.Pos, "%stimeout %s is not shorter than the lease %s; a call still running when the lease ends could be taken over and made twice at once", prefix, t.Text, leaseText)
	}
	k := e.Key
	if !k.Set && jc.givenBadly(e.Pos, "key") {
		return
	}
	if !k.Set || k.Value == "" {
		p := e.Pos
		if k.Set {
			p = k.Pos
		}
		jc.errorf(p, "%smissing key; an effect without a key cannot be made to happen once (e.g. \"%s:v{version}:%s\")", prefix, jc.effectExample(e), jc.identityExample())
		return
	}
	ejc := *jc
	ejc.prefix = prefix
	phs, ok := ejc.template(k, true)
	if !ok {
		return
	}
	if first, dup := effectKeys[k.Value]; dup {
		jc.errorf(k.Pos, "%skey %q is also the key of %s; the two effects would dedupe each other", prefix, k.Value, first)
	} else {
		effectKeys[k.Value] = fmt.Sprintf("effect %q (job %q, line %d)", e.Name.Value, jc.j.Name.Value, k.Pos.Line)
	}
	if jc.keyUse != nil {
		used := fieldsOf(phs)
		var missing []string
		for _, f := range jc.keyUse {
			if !slices.Contains(used, f) {
				missing = append(missing, "{"+f+"}")
			}
		}
		if len(missing) > 0 {
			jc.errorf(k.Pos, "%skey does not include the unit's identity: %s missing (the unit key uses it)", prefix, strings.Join(missing, ", "))
		}
	}
	if e.Version.Set && !slices.ContainsFunc(phs, func(p placeholder) bool { return p.version }) {
		jc.warnf(k.Pos, "%skey does not contain {version}; bumping version will not change the key", prefix)
	}
}

// circuit checks an effect's circuit: both bounds given, failures at
// least 1, a cool-down of at least a second and at most a day (it doubles
// with each reopening, up to max_cool_down: at least cool_down, at most a
// day; 8 times cool_down when not given).
func (jc *jobCtx) circuit(e *Effect, prefix string) {
	c := e.Circuit
	if c.Pos == (Pos{}) {
		return
	}
	switch f := c.Failures; {
	case !f.Set:
		jc.errorf(c.Pos, "%scircuit needs failures: how many failed calls in a row, across workers, open it (circuit: {failures: 5, cool_down: 30s})", prefix)
	case f.Value < 1 || f.Value > math.MaxInt32:
		jc.errorf(f.Pos, "%scircuit failures must be between 1 and %d, not %d", prefix, math.MaxInt32, f.Value)
	}
	switch d := c.CoolDown; {
	case !d.Set:
		jc.errorf(c.Pos, "%scircuit needs cool_down: how long it stays open before one probe call (circuit: {failures: 5, cool_down: 30s})", prefix)
	case d.Value < time.Second:
		jc.errorf(d.Pos, "%scircuit cool_down must be at least 1s, not %s", prefix, d.Text)
	case d.Value > 24*time.Hour:
		jc.errorf(d.Pos, "%scircuit cool_down must be at most 24h, not %s", prefix, d.Text)
	}
	switch m := c.MaxCoolDown; {
	case !m.Set:
	case c.CoolDown.Set && m.Value < c.CoolDown.Value:
		jc.errorf(m.Pos, "%scircuit max_cool_down must be at least its cool_down %s, not %s", prefix, c.CoolDown.Text, m.Text)
	case m.Value > 24*time.Hour:
		jc.errorf(m.Pos, "%scircuit max_cool_down must be at most 24h, not %s", prefix, m.Text)
	}
}

// retry checks that the backoff grows: max is not below initial. A bound
// not given is its default, so retry: {initial: 2h} alone is refused too.
func (jc *jobCtx) retry(e *Effect, prefix string) {
	r := e.Retry
	if !r.Initial.Set && !r.Max.Set {
		return
	}
	initial, initialText := DefaultRetryInitial, "1s (the default)"
	if r.Initial.Set {
		initial, initialText = r.Initial.Value, r.Initial.Text
	}
	ceiling, ceilingText, at := DefaultRetryMax, "1h (the default)", r.Initial.Pos
	if r.Max.Set {
		ceiling, ceilingText, at = r.Max.Value, r.Max.Text, r.Max.Pos
	}
	if ceiling < initial {
		jc.errorf(at, "%sretry max %s is shorter than initial %s; the wait starts at initial and doubles up to max", prefix, ceilingText, initialText)
	}
}
