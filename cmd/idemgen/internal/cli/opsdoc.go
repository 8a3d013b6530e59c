package cli

import (
	"fmt"
	"net"

	"github.com/idemgen/idemgen/generator"
)

// The status, ledger and ui verbs. Their implementation (package
// cmd/idemgen/internal/ops) links the database drivers and the runtime,
// which are most of what a service would compile before its first
// generate, so the idemgen command does not import it: it runs them in its
// database child, idemgen built with the build tag idemgen_ops (whose one
// file links them, LinkOps), built once: by the first generate in a module
// that takes idemgen as its tool, else the first time one of them is run
// (ops_child.go). Their flags, usage and the checks that need no database
// are here, answered without the child.

// opsTag is the build tag with which idemgen links status, ledger and ui.
const opsTag = "idemgen_ops"

// OpsExeEnv names an idemgen built with -tags idemgen_ops for status and
// ledger to run as they are, instead of building their own.
const OpsExeEnv = "IDEMGEN_OPS_EXE"

// ledgerStates are the states ledger list -state takes (idemops.States;
// a test holds them equal).
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
  lift JOB EFFECT
        lifts the effect's pause (its provider's idem.PauseEffect) or
        closes its circuit by hand: calls start again at once, and the
        circuit counts failures from none; status shows either
  limit [-rate N/period] [-concurrency N] [-by NAME] JOB EFFECT
  limit -reset JOB EFFECT
        overrides the spec's rate and concurrency of the effect on every
        worker sharing the database, with no restart: each follows within
        about a second. What is not given stays the spec's; -reset goes
        back to the spec's values. Status shows the override, who set it
        (-by, default $USER) and since when
  pause -for DURATION [-by NAME] JOB EFFECT
        pauses the effect on every worker, as its provider's
        idem.PauseEffect does: no call starts before DURATION has passed
        and no waiting row counts an attempt; lift ends it early. Status
        shows who paused it and until when

An effect that a worker holds under a live lease is never retried or reset
out from under it. Each retry or reset is one transaction, logged to
stderr. Exits 0 when done, 1 when refused (leased, not parked, no such
key, reset without -force; also spec errors), 2 on a usage error, a spec
that cannot be read, or a database that cannot be read or written.`

const uiAbout = `serves the operations page of the spec's package on this machine: every
job with its effects (owed, waiting, leased, failing, parked, done under
the current and older versions), a chart of effects done and failed per
minute, the parked effects and units (paged, searchable by key) and any
key's whole history. It is the handler a service mounts (idem/idemui),
over the same reads as status and ledger.

It listens on 127.0.0.1:8080 unless -addr says otherwise; a non-loopback
address needs -allow-remote. It is read-only unless -allow-actions: then
each parked item's page has a Retry and a Forget button, which run what
ledger retry and ledger reset run, after a confirmation page that shows
what will be resent, each logged to stderr with the local user's name.
idemgen ui has no authentication of its own, so actions are served on a
loopback address only. -redact hides stored payloads and results. It runs
until interrupted.`

// CheckUIAddr refuses an -addr that ui must not serve on: a non-loopback
// one without -allow-remote, and any non-loopback one with actions.
func CheckUIAddr(e Env, o *Options) int {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen ui: -addr %q: %v\n", o.Addr, err)
		return ExitUsage
	}
	if isLoopback(host) {
		return ExitOK
	}
	if !o.AllowRemote {
		fmt.Fprintf(e.Stderr, "idemgen ui: -addr %s is not a loopback address: anyone who reaches it would see the ledger's rows and payloads; "+
			"add -allow-remote to serve it there (read-only), or mount idemui.Handler in your service behind its authentication\n", o.Addr)
		return ExitUsage
	}
	if o.AllowActions {
		fmt.Fprintf(e.Stderr, "idemgen ui: -allow-actions is served on a loopback address only: idemgen ui has no authentication; "+
			"mount idemui.Handler in your service, behind its authentication, to act from elsewhere\n")
		return ExitUsage
	}
	return ExitOK
}

// isLoopback reports whether host names this machine only: localhost or
// a loopback IP. "" (every interface) is not.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// OpsPackage is what status and ledger need before a database: -db, and
// the spec resolved to its package. A code other than ExitOK ends the verb.
func OpsPackage(e Env, verb string, o *Options) (*generator.Package, int) {
	if o.DB == "" {
		fmt.Fprintf(e.Stderr, "idemgen %s: -db is required: a PostgreSQL URL (postgres://...) or a SQLite file\n", verb)
		return nil, ExitUsage
	}
	f, code := loadSpec(e, o.File, o)
	if code != ExitOK {
		return nil, code
	}
	pkg, err := generator.Resolve(f)
	if err != nil {
		printErr(e, err)
		return nil, ExitFail
	}
	return pkg, ExitOK
}
