package cli

import (
	"fmt"

	"github.com/idemgen/idemgen/generator/model"
)

// The status and ledger verbs. Their implementation (ops.go) links the
// database drivers and the runtime, which are most of what a service would
// compile before its first generate, so it is built only with the build
// tag idemgen_ops: the idemgen command runs them in its database child,
// idemgen built with that tag, once, the first time status or ledger is
// run (ops_child.go).

// opsTag is the build tag with which idemgen links status and ledger.
const opsTag = "idemgen_ops"

// OpsExeEnv names an idemgen built with -tags idemgen_ops for status and
// ledger to run as they are, instead of building their own.
const OpsExeEnv = "IDEMGEN_OPS_EXE"

// ledgerStates are the states ledger list -state takes (ops.States; a
// test holds them equal).
var ledgerStates = []string{"pending", "leased", "done", "parked", "failing", "retry"}

const statusAbout = `reads the database of the spec's package (a PostgreSQL URL, with
search_path=... for a schema, or a SQLite file) and prints, per job: the
watermark or cursor and when a run last saved it; its effects owed
(pending), leased by a worker, failing (owed again after a failed
attempt), parked (max_attempts or a permanent failure; nothing retries them) and
done, with the age of the oldest owed one and how many are owed past their
lease (under no live lease and untouched for longer than the effect's
lease: nobody is working on them); and its units failing, parked and put
back for retry. It writes nothing.

A health check: exits 0 when healthy, 1 when an effect or a unit is parked
or an effect is owed past its lease (also 1 on spec errors), 2 on a usage
error, a spec that cannot be read, or a database that cannot be read.`

const ledgerAbout = `inspects and repairs the package's bookkeeping rows in its database:
ledger rows (one per effect key), parked units (units whose writes failed)
and handed-in key records (one per handed-in unit key).

  list [-job J] [-effect E] [-state S] [-prefix P] [-limit N] [-after CURSOR] [-errors] [-json]
        a page of ledger rows (by effect key), then parked units (by job
        and key): at most -limit rows (default 100; 0 for all). When more
        follow it says so on stderr with the cursor to pass as -after for
        the next page; -json gives it as "next". A done row's last error is
        from an attempt before it was done: shown only with -errors, marked
        history
  show [-job J] [-json] KEY
        every row under KEY: the ledger row of that effect key (state,
        attempts, lease, last error, kept result, payload), the parked unit
        and the handed-in key record of that unit key
  retry [-job J] KEY
  retry [-job J] -all-parked
        puts a parked effect back to pending with its attempts at 0, and a
        failing or parked unit back for retry with its attempts at 0: the
        next run (drain, for handed-in units) performs or writes them, with
        the payload stored when the effect was reserved or the unit last
        failed; a fix to the source data does not reach a retry
  reset [-job J] [-force] KEY
        forgets KEY on purpose: removes its ledger row, parked unit and
        handed-in key record and prints them. Without -force it prints what
        it would remove, removes nothing and exits 1

An effect that a worker holds under a live lease is never retried or reset
out from under it. Each retry or reset is one transaction, logged to
stderr. Exits 0 when done, 1 when refused (leased, not parked, no such
key, reset without -force; also spec errors), 2 on a usage error, a spec
that cannot be read, or a database that cannot be read or written.`

// opsPackage is what status and ledger need before a database: -db, and
// the spec resolved to its package. A code other than exitOK ends the verb.
func opsPackage(e env, verb string, o *options) (*model.Package, int) {
	if o.db == "" {
		fmt.Fprintf(e.stderr, "idemgen %s: -db is required: a PostgreSQL URL (postgres://...) or a SQLite file\n", verb)
		return nil, exitUsage
	}
	f, code := loadSpec(e, o.file, o)
	if code != exitOK {
		return nil, code
	}
	pkg, err := model.Resolve(f)
	if err != nil {
		printErr(e, err)
		return nil, exitFail
	}
	return pkg, exitOK
}
