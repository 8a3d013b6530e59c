package idemrt

// Parked broker messages. A consumer (idem/idembroker) parks a message
// that can never become a written unit (a body that does not decode, an
// empty key, a payload mismatch) as it came, in the job's parked table under
// a key of its own ("message:" + the broker's id), straight to state
// parked: `idemgen status`, `idemgen ledger list` and the operations page
// show it with its body, headers and error. It is not a unit, so nothing
// can write it again: a person who puts it back (ledger retry) sees it
// parked again by the next Drain with an error that says so; the fix is to
// publish a corrected message, then forget this row (ledger reset).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"
)

// RawMessage is a broker message as it came, for parking.
type RawMessage struct {
	ID      string
	Body    []byte
	Headers map[string]string
}

// parkedMessage is a RawMessage as the parked table stores it: under
// "broker_message", so that no unit's payload is taken for one. The body
// is kept as JSON when it is JSON, else as text when it is UTF-8, else in
// base64, so a person reads it as it came.
type parkedMessage struct {
	Message struct {
		ID      string            `json:"id"`
		Body    json.RawMessage   `json:"body,omitempty"`
		Text    *string           `json:"text,omitempty"`
		Base64  []byte            `json:"base64,omitempty"`
		Headers map[string]string `json:"headers,omitempty"`
	} `json:"broker_message"`
}

func encodeMessage(m RawMessage) ([]byte, error) {
	var p parkedMessage
	p.Message.ID, p.Message.Headers = m.ID, m.Headers
	switch body := bytes.TrimSpace(m.Body); {
	case len(body) > 0 && json.Valid(body):
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			return nil, err
		}
		p.Message.Body = compact.Bytes()
	case utf8.Valid(m.Body):
		s := string(m.Body)
		p.Message.Text = &s
	default:
		p.Message.Base64 = m.Body
	}
	return json.Marshal(p)
}

// isParkedMessage reports whether a parked-table payload is a parked
// broker message rather than a unit.
func isParkedMessage(payload []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(payload, &probe) != nil || len(probe) != 1 {
		return false
	}
	_, ok := probe["broker_message"]
	return ok
}

// errMessageNotUnit is why a parked broker message put back for retry is
// parked again.
var errMessageNotUnit = errors.New("a parked broker message is not a unit, so it cannot be written again: publish a corrected message, then forget this row (idemgen ledger reset KEY -force)")

// ParkMessage parks a broker message that can never become a written unit
// under key (idembroker uses "message:" + its broker id), with cause as its
// error: one row in the job's parked table, in state parked at once. A
// message already parked under key with the same body and headers is left
// as it is, so a redelivery is parked once.
func (e *Engine[U]) ParkMessage(ctx context.Context, key string, m RawMessage, cause error) error {
	payload, err := encodeMessage(m)
	if err != nil {
		return fmt.Errorf("job %q: park message %q: %w", e.def.Name, m.ID, err)
	}
	return e.parkPayload(ctx, key, payload, cause, true)
}

// parkPayload writes key's parked-table row in state parked with payload
// and cause; with once, a row already parked with this payload is left
// alone.
func (e *Engine[U]) parkPayload(ctx context.Context, key string, payload []byte, cause error, once bool) error {
	sum := sha256.Sum256(payload)
	f := UnitFailure{Job: e.def.Name, UnitKey: key, Payload: payload, Hash: sum[:], LastError: cause.Error(), JobVersion: e.def.Version}
	err := e.st.InTx(ctx, func(q Querier) error {
		if once {
			state, hash, found, err := q.LookupUnitFailure(ctx, e.def.Name, key)
			if err != nil {
				return err
			}
			if found && state == UnitStateParked && bytes.Equal(hash, f.Hash) {
				return nil
			}
		}
		if err := q.RecordUnitFailure(ctx, f, e.opt.now()); err != nil {
			return err
		}
		_, _, err := q.SettleUnitFailure(ctx, e.def.Name, key, 1) // one attempt is enough: parked
		return err
	})
	if err != nil {
		return fmt.Errorf("job %q key %q: park: %w", e.def.Name, key, err)
	}
	return nil
}

// reparkUnreadable parks again a row put back for retry whose payload
// cannot be written as a unit: a parked broker message, or a payload that
// no longer decodes into the unit. Writing it would loop or, worse, write
// a unit of zero values.
func (e *Engine[U]) reparkUnreadable(ctx context.Context, row UnitFailure, cause error) {
	log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", row.UnitKey))
	if err := e.parkPayload(ctx, row.UnitKey, row.Payload, cause, false); err != nil {
		log.Error("idemgen: a row put back for retry cannot be written, and could not be parked again", slog.Any("err", err))
		return
	}
	log.Error("idemgen: a row put back for retry cannot be written; parked again", slog.Any("err", cause))
}
