package crashsim

// The consumer families' fixture and the checks every consumer scenario
// ends with: every message acknowledged or settled dead; a dead message
// being one that can never succeed, parked once; the destination holding
// one row per key, of the payload that was acknowledged; each effect of
// each applied unit performed once by the provider (called twice only when
// a consumer died between the call and its record); and, at every
// acknowledgement, its unit's transaction committed. A settlement that a
// consumer's goroutine sends after another of its goroutines died is
// refused by the broker, as a dead process sends none.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// consumeFixture builds the messages: units 1 to 3, a copy of unit 1, a
// body that does not decode, unit 4 with its key field empty (when a key
// field is a string) and unit 2 with another payload (when its revision
// changes a field).
func consumeFixture[U any](job *Job[U]) ([]U, []*simMsg, error) {
	units := []U{job.Unit(1, 0), job.Unit(2, 0), job.Unit(3, 0)}
	var msgs []*simMsg
	add := func(kind simMsgKind, unit int, u *U, body []byte) error {
		m := &simMsg{kind: kind, unit: unit}
		m.msg.ID = fmt.Sprintf("sim/%d", len(msgs)+1)
		if u != nil {
			var err error
			if body, m.msg.Headers, err = encodeSimMessage(job, *u); err != nil {
				return err
			}
		}
		m.msg.Body = body
		msgs = append(msgs, m)
		return nil
	}
	for i := range units {
		if err := add(msgGood, i, &units[i], nil); err != nil {
			return nil, nil, err
		}
		if i == 0 {
			if err := add(msgGood, 0, &units[0], nil); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := add(msgUndecoded, -1, nil, []byte(`{"not json`)); err != nil {
		return nil, nil, err
	}
	if f, ok := emptyableKeyField(job); ok {
		u := job.Unit(4, 0)
		body, headers, err := encodeSimMessage(job, u)
		if err != nil {
			return nil, nil, err
		}
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, nil, err
		}
		obj[f] = ""
		if _, ok := headers[job.Headers[f]]; ok {
			headers[job.Headers[f]] = ""
		}
		body, _ = json.Marshal(obj)
		msgs = append(msgs, &simMsg{kind: msgEmptyKey, unit: -1, msg: idembroker.Message{ID: fmt.Sprintf("sim/%d", len(msgs)+1), Body: body, Headers: headers}})
	}
	changed := job.Unit(2, 1)
	a, _ := json.Marshal(units[1])
	b, _ := json.Marshal(changed)
	if job.keyOf(changed) == job.keyOf(units[1]) && string(a) != string(b) {
		units = append(units, changed)
		if err := add(msgChangedKey, len(units)-1, &units[len(units)-1], nil); err != nil {
			return nil, nil, err
		}
	}
	return units, msgs, nil
}

// emptyableKeyField returns a string field of the unit key, which a
// message can leave empty.
func emptyableKeyField[U any](job *Job[U]) (string, bool) {
	for _, f := range job.Fields {
		if f.InKey && f.Type == "string" && !f.Nullable {
			return f.Name, true
		}
	}
	return "", false
}

// encodeSimMessage encodes u as a producer would: the JSON body by field
// name, and each field the spec reads from a header also in that header.
func encodeSimMessage[U any](job *Job[U], u U) ([]byte, map[string]string, error) {
	body, err := json.Marshal(u)
	if err != nil {
		return nil, nil, err
	}
	if len(job.Headers) == 0 {
		return body, nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, nil, err
	}
	headers := map[string]string{}
	for field, header := range job.Headers {
		raw, ok := obj[field]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			headers[header] = s
		} else {
			headers[header] = string(raw)
		}
		delete(obj, field)
	}
	body, err = json.Marshal(obj)
	return body, headers, err
}

// checkAck: a message is acknowledged only once its unit's transaction
// committed: its row is in the destination, or its effects are in the
// ledger.
func (r *consumeRun[U]) checkAck(m *simMsg) {
	if m.kind != msgGood && m.kind != msgChangedKey {
		return
	}
	r.ackCheck.Lock()
	defer r.ackCheck.Unlock()
	u := r.units[m.unit]
	key := r.job.keyOf(u)
	ctx := context.Background()
	obs := r.db.observer()
	if r.job.HasDest && r.job.Rows != nil {
		rows, err := r.job.Rows(ctx, obs)
		if err != nil {
			r.violate("ack of %s: read the destination: %v", m.msg.ID, err)
			return
		}
		if !slices.ContainsFunc(rows, func(row U) bool { return r.job.keyOf(row) == key }) {
			r.violate("message %s (unit %s) acknowledged before its unit's row committed", m.msg.ID, key)
		}
		return
	}
	if len(r.job.Effects) == 0 {
		return
	}
	fxKey := oracleKey(r.job.Effects[0].Key, baseVersions(r.job).vars(0), u)
	if _, found, err := obs.Auto().Effect(ctx, fxKey); err == nil && !found {
		r.violate("message %s (unit %s) acknowledged before its effect %s was reserved", m.msg.ID, key, fxKey)
	}
}

// checkEnd holds the end checks of every consumer family.
func (r *consumeRun[U]) checkEnd() {
	ctx := context.Background()
	msgs := r.broker.snapshot()
	r.mu.Lock()
	crashes := r.crashes
	r.mu.Unlock()
	// The payload each key was acknowledged with: exactly one.
	winner := map[string]int{}
	for _, m := range msgs {
		switch {
		case m.state != msgAcked && m.state != msgDead:
			r.violate("message %s never settled (delivered %d times)", m.msg.ID, m.delivered)
		case m.kind == msgUndecoded || m.kind == msgEmptyKey:
			if m.state != msgDead {
				r.violate("message %s can never succeed but was acknowledged", m.msg.ID)
			}
			if m.deads != 1 {
				r.violate("message %s settled dead %d times, want once", m.msg.ID, m.deads)
			}
			if m.delivered > 1+crashes {
				r.violate("message %s that can never succeed was delivered %d times: it loops", m.msg.ID, m.delivered)
			}
		case m.state == msgAcked:
			key := r.job.keyOf(r.units[m.unit])
			if w, ok := winner[key]; ok && w != m.unit {
				r.violate("key %s acknowledged with two payloads (messages of units %d and %d)", key, w, m.unit)
			}
			winner[key] = m.unit
		}
	}
	for _, m := range msgs {
		if m.state == msgDead && m.kind != msgUndecoded && m.kind != msgEmptyKey {
			key := r.job.keyOf(r.units[m.unit])
			if w, ok := winner[key]; !ok || w == m.unit {
				r.violate("message %s (unit %s) settled dead, but its payload is the one its key holds", m.msg.ID, key)
			}
		}
	}
	// Parked: one row per message that can never succeed.
	parked, err := r.db.observer().Auto().UnitFailures(ctx)
	if err != nil {
		r.violate("read parked units: %v", err)
	}
	dead := 0
	for _, m := range msgs {
		if m.state == msgDead {
			dead++
		}
	}
	if got := countParked(parked, r.job.Name); got != dead {
		r.violate("%d parked rows for %d dead messages, want one each: %v", got, dead, parkedKeys(parked))
	}
	r.checkRows(ctx, winner)
	r.checkCalls(winner, crashes)
}

func countParked(rows []idem.ParkedUnit, job string) int {
	n := 0
	for _, p := range rows {
		if p.Job == job && p.State == idem.UnitStateParked {
			n++
		}
	}
	return n
}

func parkedKeys(rows []idem.ParkedUnit) []string {
	var out []string
	for _, p := range rows {
		out = append(out, p.Key+"("+p.State+")")
	}
	return out
}

// checkRows: one row per applied key, holding the acknowledged payload.
func (r *consumeRun[U]) checkRows(ctx context.Context, winner map[string]int) {
	if !r.job.HasDest || r.job.Rows == nil {
		return
	}
	rows, err := r.job.Rows(ctx, r.db.observer())
	if err != nil {
		r.violate("read the destination: %v", err)
		return
	}
	seen := map[string]bool{}
	for _, row := range rows {
		key := r.job.keyOf(row)
		if seen[key] {
			r.violate("two rows for key %s", key)
		}
		seen[key] = true
		w, ok := winner[key]
		if !ok {
			r.violate("a row for key %s, which no message was acknowledged for", key)
			continue
		}
		want, _ := json.Marshal(r.units[w])
		got, _ := json.Marshal(row)
		if !sameJSONUnit(want, got) {
			r.violate("row %s holds %s, want the acknowledged %s", key, got, want)
		}
	}
	for key := range winner {
		if !seen[key] {
			r.violate("key %s acknowledged but no row holds it", key)
		}
	}
}

// sameJSONUnit compares two units' JSON, times by instant.
func sameJSONUnit(a, b []byte) bool {
	var x, y map[string]any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	for k, v := range x {
		if s, ok := v.(string); ok {
			if t1, err := time.Parse(time.RFC3339Nano, s); err == nil {
				if s2, ok := y[k].(string); ok {
					if t2, err := time.Parse(time.RFC3339Nano, s2); err == nil && t1.Equal(t2) {
						continue
					}
				}
			}
		}
		if fmt.Sprint(v) != fmt.Sprint(y[k]) {
			return false
		}
	}
	return len(x) == len(y)
}

// checkCalls: each effect of each acknowledged unit applied once by the
// provider, and no other key applied; a key called twice only when a
// consumer died between a call and its record.
func (r *consumeRun[U]) checkCalls(winner map[string]int, crashes int) {
	want := map[string]bool{}
	for _, w := range winner {
		for i, fx := range r.job.Effects {
			if fx.When != idemrt.WhenAlways && !r.job.HasDest {
				continue
			}
			want[oracleKey(fx.Key, baseVersions(r.job).vars(i), r.units[w])] = true
		}
	}
	r.prov.mu.Lock()
	applied := maps.Clone(r.prov.applied)
	calls := maps.Clone(r.prov.calls)
	r.prov.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if applied[k] != 1 {
			r.violate("effect %s applied %d times, want once (%s)", k, applied[k], r.ledgerRowOf(k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		if !want[k] {
			r.violate("provider called for %s, which no acknowledged unit decides", k)
			continue
		}
		if calls[k] > 1 && !r.diedAfterCall(k) {
			r.violate("provider called %d times for %s, want once (no consumer died between its call and its record)", calls[k], k)
		}
	}
}

// diedAfterCall reports whether a consumer died after calling the
// provider for key and before recording the call.
func (r *consumeRun[U]) diedAfterCall(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.window[key]
}

// ledgerRowOf says what the ledger holds for an effect key, for a
// violation's message.
func (r *consumeRun[U]) ledgerRowOf(key string) string {
	e, found, err := r.db.observer().Auto().Effect(context.Background(), key)
	switch {
	case err != nil:
		return "ledger: " + err.Error()
	case !found:
		return "no ledger row"
	}
	return fmt.Sprintf("ledger: %s, %d attempts, last error %q", e.State, e.Attempts, e.LastError)
}
