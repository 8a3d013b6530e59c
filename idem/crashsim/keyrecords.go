package crashsim

// The key-record check: a handed-in job (source: none) keeps a key record
// per unit key (the seen table: the key and its first payload's hash),
// which decides whether a unit handed in again is a repeat, a mismatch
// or new. Nothing a caller sees reads the records directly: a record lost
// or kept wrongly shows only when the key comes again, and then often
// not (an insert_once row that holds other data answers a mismatch
// anyway). So they are compared here with what must agree with them:
//
//   - every ledger row of the job has its unit key's record (a record
//     goes only with the last of its key's rows, past retention);
//   - with no purge in the scenario, every key the oracle saw handed in
//     (not a poison unit's, whose write never committed) has a record,
//     and there is no record of any other key; a staged job's poison unit
//     without a unit max_attempts holds its whole call back for good, so
//     there its call's other keys may have none (poison: relaxed rows);
//   - after a purge past every retention (every effect has one), a record
//     is left exactly where a ledger row of its key is left: the purge
//     removes both together.

import (
	"context"
	"maps"
	"slices"

	"github.com/idemgen/idemgen/idem"
)

// checkKeyRecords compares the job's key records with entries (the whole
// ledger, read just before) and, unless a purge has run, with the keys
// the oracle saw handed in; purgedOld says a purge past every retention
// has just run.
func (r *simRun[U]) checkKeyRecords(ctx context.Context, where string, entries []idem.LedgerEntry, purgedOld bool) {
	if r.job.Source != SourceNoneName || r.job.Tables.Seen == "" {
		return
	}
	keys, err := r.db.keyRecords(ctx, r.job.Tables.Seen, r.job.Name)
	if err != nil {
		r.violate("%s: read key records: %v", where, err)
		return
	}
	records := map[string]bool{}
	for _, k := range keys {
		records[k] = true
	}
	rows := map[string]string{} // unit key -> one of its ledger rows
	for _, e := range entries {
		if e.Job == r.job.Name {
			rows[e.UnitKey] = e.Key
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		if !records[k] {
			r.violate("%s: ledger row %s of handed-in key %s has no key record (a repeat of the key would be taken as new)", where, rows[k], k)
		}
	}
	if purgedOld && len(r.job.Effects) > 0 && !slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.Retention <= 0 }) {
		for _, k := range slices.Sorted(maps.Keys(records)) {
			if rows[k] == "" {
				r.violate("%s: the purge past every retention kept the key record of %s, whose every ledger row it removed", where, k)
			}
		}
	}
	r.mu.Lock()
	purged := r.purgeRan
	r.mu.Unlock()
	if purged || r.fam.purgesPastRetention() {
		return // a purge may have forgotten keys, rows and records together
	}
	m := newSimModel(r.job)
	for _, d := range r.history {
		if !r.isPoison(d.unit) {
			m.apply(d)
		}
	}
	heldBack := r.sc.poison > 0 && r.job.Stage && r.job.UnitMaxAttempts == 0
	for _, k := range slices.Sorted(maps.Keys(m.seen)) {
		if !records[k] && !heldBack {
			r.violate("%s: handed-in key %s has no key record", where, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(records)) {
		if _, ok := m.seen[k]; !ok {
			r.violate("%s: a key record of %s, a key never handed in (or only a poison unit's)", where, k)
		}
	}
}
