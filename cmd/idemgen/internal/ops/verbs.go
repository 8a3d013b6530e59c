// Package ops is idemgen's status, ledger and ui: the verbs that read and
// repair a generated package's database. It links the database drivers
// (pgx, SQLite) and the runtime, so only idemgen's database child imports
// it (cmd/idemgen built with -tags idemgen_ops, which links the verbs with
// cli.LinkOps); the idemgen command runs them there. It opens the database
// and describes the package from the spec; the reads and the recovery are
// the runtime's (idem/idemops), which a service that mounts the operations
// page (idem/idemui) uses without the generator.
package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemui"
)

// openOps loads the spec and opens its package's database. A code other
// than cli.ExitOK ends the verb.
func openOps(e cli.Env, verb string, o *cli.Options) (*idemops.DB, *generator.Package, int) {
	pkg, code := cli.OpsPackage(e, verb, o)
	if code != cli.ExitOK {
		return nil, nil, code
	}
	log := slog.New(slog.NewTextHandler(e.Stderr, nil))
	db, err := Open(e.Ctx, o.DB, pkg, log)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen %s: %v\n", verb, err)
		return nil, nil, cli.ExitUsage
	}
	return db, pkg, cli.ExitOK
}

func Status(e cli.Env, args []string) int {
	var o cli.Options
	if _, code, ok := cli.ParseFlags(e, "status", args, 0, &o); !ok {
		return code
	}
	db, _, code := openOps(e, "status", &o)
	if code != cli.ExitOK {
		return code
	}
	defer db.Close()
	st, err := db.Status(e.Ctx)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen status: %v\n", err)
		return cli.ExitUsage
	}
	if o.JSON {
		if code := printJSON(e, st); code != cli.ExitOK {
			return code
		}
	} else {
		printStatus(e.Stdout, st)
	}
	if !st.Healthy {
		return cli.ExitFail
	}
	return cli.ExitOK
}

// printStatus prints a Status as text, a block per job.
func printStatus(w io.Writer, st *idemops.Status) {
	fmt.Fprintf(w, "package %s (%s) at %s\n", st.Package, st.Dialect, stamp(st.At))
	for _, js := range st.Jobs {
		source := js.Source
		switch {
		case !js.InSpec:
			source = "not in the spec"
		case js.Source == idemops.SourceNone:
			source = "handed in"
		}
		fmt.Fprintf(w, "\n%s (%s)\n", js.Job, source)
		switch p := js.Progress; {
		case p != nil && p.Watermark != nil:
			fmt.Fprintf(w, "  watermark %s, saved %s\n", stamp(*p.Watermark), since(st.At, p.Saved))
		case p != nil && p.Cursor != nil:
			fmt.Fprintf(w, "  cursor %q (position %d), moved %s\n", *p.Cursor, p.Position, since(st.At, p.Saved))
		case js.Source == idemops.SourceNone:
		default:
			fmt.Fprintf(w, "  no progress saved yet\n")
		}
		for _, es := range js.Effects {
			name := es.Effect
			if !es.InSpec {
				name += " (not in the spec)"
			}
			owed := fmt.Sprint(es.Owed)
			if es.Owed > 0 {
				owed += fmt.Sprintf(" (oldest %s, %d past its %s lease)", age(st.At, *es.Oldest), es.Overdue, time.Duration(es.Lease))
			}
			leased := fmt.Sprint(es.Leased)
			if es.Waiting > 0 {
				leased += fmt.Sprintf(", waiting %d (next attempt %s)", es.Waiting, retryText(*es.NextAttempt, st.At))
			}
			fmt.Fprintf(w, "  effect %s: owed %s, leased %s, failing %d, parked %d, done %s\n",
				name, owed, leased, es.Failing, es.Parked, doneText(es, es.Done))
			if len(es.Superseded) > 0 {
				fmt.Fprintf(w, "    %s\n", historyText(js, es))
			}
			if es.Gate != nil {
				fmt.Fprintf(w, "    %s\n", idemops.GateText(es.Gate))
			}
			if es.Override != nil {
				fmt.Fprintf(w, "    %s\n", es.Override.Text())
			}
		}
		fmt.Fprintf(w, "  units: failing %d, parked %d, put back for retry %d\n", js.Units.Failing, js.Units.Parked, js.Units.Retry)
	}
	fmt.Fprintln(w)
	if st.Healthy {
		fmt.Fprintln(w, "healthy")
		return
	}
	for _, p := range st.Problems {
		fmt.Fprintf(w, "unhealthy: %s\n", p)
	}
}

// historyText says what the ledger keeps of an effect's superseded
// versions and what a Backfill would perform again because of the bump.
func historyText(js idemops.JobStatus, es idemops.EffectStatus) string {
	versions := make([]string, len(es.Superseded))
	for i, v := range es.Superseded {
		versions[i] = fmt.Sprintf("v%d", v)
	}
	s := fmt.Sprintf("history: done %s under %s (superseded by v%d)", doneText(es, es.History), strings.Join(versions, ", "), es.Version)
	if es.Again == 0 {
		return s + fmt.Sprintf("; every unit done under them is reserved under v%d already", es.Version)
	}
	again := "a Run that reads them again in its overlap, or a Backfill whose window holds them,"
	if js.Source != idemops.SourceWatermark {
		again = "processing them again" // no Backfill without a watermark
	}
	return s + fmt.Sprintf("; %s performs %s again for %s", again, es.Effect, plural(es.Again, "unit"))
}

// doneText is a count of done rows: n, or "about n" where status
// estimated it from a sample of a large ledger.
func doneText(es idemops.EffectStatus, n int) string {
	if es.Estimated {
		return fmt.Sprintf("about %d (estimated: more than %d done)", n, idemops.ExactDoneLimit)
	}
	return fmt.Sprint(n)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// age is how long before now t was, to the second.
func age(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() }

func since(now, t time.Time) string { return fmt.Sprintf("%s (%s ago)", stamp(t), age(now, t)) }

func printJSON(e cli.Env, v any) int {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(e.Stderr, "idemgen: %v\n", err)
		return cli.ExitFail
	}
	return cli.ExitOK
}

// ledgerFlags are the flags each ledger subcommand takes, beside -db and -f.
var ledgerFlags = map[string][]string{
	"list":  {"job", "effect", "state", "prefix", "limit", "after", "errors", "json"},
	"show":  {"job", "json"},
	"retry": {"job", "all-parked"},
	"reset": {"job", "force"},
	"lift":  {},
	"limit": {"rate", "concurrency", "reset", "by"},
	"pause": {"for", "by"},
}

// subcommands names the ledger's subcommands, for usage errors.
const subcommands = "list, show, retry, reset, lift, limit or pause"

func Ledger(e cli.Env, args []string) int {
	var o cli.Options
	args, code, ok := cli.ParseFlags(e, "ledger", args, -1, &o)
	if !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(e.Stderr, "idemgen ledger: "+format+"\n", a...)
		fmt.Fprintf(e.Stderr, "run 'idemgen help ledger' for usage\n")
		return cli.ExitUsage
	}
	if len(args) == 0 {
		return usage("missing subcommand: %s", subcommands)
	}
	sub, args := args[0], args[1:]
	allowed, ok := ledgerFlags[sub]
	if !ok {
		return usage("unknown subcommand %q: %s", sub, subcommands)
	}
	for name := range o.Set {
		if name != "db" && name != "f" && !slices.Contains(allowed, name) {
			return usage("%s takes no -%s", sub, name)
		}
	}
	if o.State != "" && !slices.Contains(idemops.States, o.State) {
		return usage("unknown state %q: %s", o.State, strings.Join(idemops.States, ", "))
	}
	wantKey := sub == "show" || sub == "reset" || sub == "retry" && !o.AllParked
	switch {
	case sub == "lift" && len(args) != 2:
		return usage("lift takes JOB EFFECT: the effect whose pause to lift or circuit to close")
	case (sub == "limit" || sub == "pause") && len(args) != 2:
		return usage("%s takes JOB EFFECT: the effect whose limits to set", sub)
	case sub == "limit" && o.Reset == (o.Set["rate"] || o.Set["concurrency"]):
		return usage("limit takes -rate N/period, -concurrency N or both, or -reset alone")
	case sub == "limit" && o.Set["concurrency"] && o.Concurrency <= 0:
		return usage("limit: -concurrency %d: want a positive number of calls at once", o.Concurrency)
	case sub == "pause" && o.For <= 0:
		return usage("pause takes -for DURATION, a positive one (30m, 2h)")
	case sub == "lift" || sub == "limit" || sub == "pause":
	case !wantKey && len(args) > 0:
		return usage("%s: unexpected argument %q", sub, args[0])
	case wantKey && len(args) != 1:
		if sub == "retry" {
			return usage("retry takes one KEY, or -all-parked")
		}
		return usage("%s takes one KEY", sub)
	}
	db, pkg, code := openOps(e, "ledger", &o)
	if code != cli.ExitOK {
		return code
	}
	defer db.Close()
	switch sub {
	case "list":
		return ledgerList(e, db, &o)
	case "show":
		return ledgerShow(e, db, &o, args[0])
	case "retry":
		return ledgerRetry(e, db, pkg, &o, args)
	case "lift":
		return ledgerLift(e, db, args[0], args[1])
	case "limit":
		return ledgerLimit(e, db, &o, args[0], args[1])
	case "pause":
		return ledgerPause(e, db, &o, args[0], args[1])
	default:
		return ledgerReset(e, db, &o, args[0])
	}
}

// ledgerErr prints an error of a ledger subcommand and returns its code:
// refusals and missing keys are answers (1), database errors are not (2).
func ledgerErr(e cli.Env, sub string, err error) int {
	if refused, ok := errors.AsType[*idemops.RefusedError](err); ok {
		for _, r := range refused.Reasons {
			fmt.Fprintf(e.Stderr, "idemgen ledger %s: refused: %s\n", sub, r)
		}
		fmt.Fprintf(e.Stderr, "idemgen ledger %s: nothing was changed\n", sub)
		return cli.ExitFail
	}
	fmt.Fprintf(e.Stderr, "idemgen ledger %s: %v\n", sub, err)
	if errors.Is(err, idemops.ErrNotFound) {
		return cli.ExitFail
	}
	return cli.ExitUsage
}

func ledgerList(e cli.Env, db *idemops.DB, o *cli.Options) int {
	rows, err := db.List(e.Ctx, idemops.Filter{Job: o.Job, Effect: o.Effect, State: o.State, Prefix: o.Prefix, Limit: o.Limit, After: o.After})
	if err != nil {
		return ledgerErr(e, "list", err)
	}
	if rows.Next != "" {
		fmt.Fprintf(e.Stderr, "idemgen ledger list: showing %d rows; more follow: add -after %s for the next page\n", len(rows.Effects)+len(rows.Units), shellQuote(rows.Next))
	}
	if o.JSON {
		return printJSON(e, rows)
	}
	if rows.Empty() {
		fmt.Fprintln(e.Stderr, "idemgen ledger list: no rows")
		return cli.ExitOK
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tJOB\tEFFECT\tSTATE\tATTEMPTS\tKEY\tNOTE")
	now := time.Now()
	for _, r := range rows.Effects {
		note := firstLine(r.LastError)
		if r.State == idemops.EffectDone {
			// A done row keeps the error of an attempt before it was
			// done: history, shown only when asked for.
			note = ""
			if o.Errors && deref(r.LastError) != "" {
				note = "history: " + firstLine(r.LastError)
			}
		}
		if r.State == idemops.EffectLeased {
			note = fmt.Sprintf("leased by %s for %s", deref(r.LeaseOwner), r.LeaseUntil.Sub(now).Round(time.Second))
		}
		fmt.Fprintf(tw, "effect\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Job, r.Effect, r.State, attempts(r.Attempts, r.MaxAttempts, "/"), r.Key, note)
	}
	for _, r := range rows.Units {
		fmt.Fprintf(tw, "unit\t%s\t-\t%s\t%s\t%s\t%s\n", r.Job, r.State, attempts(r.Attempts, r.MaxAttempts, "/"), r.Key, firstLine(&r.LastError))
	}
	tw.Flush()
	return cli.ExitOK
}

// attempts shows attempts against max_attempts, when there is one.
func attempts(n, max int, of string) string {
	if max <= 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d%s%d", n, of, max)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// firstLine shortens an error for a table cell.
func firstLine(s *string) string {
	if s == nil {
		return ""
	}
	line, _, _ := strings.Cut(*s, "\n")
	if utf8.RuneCountInString(line) > 80 {
		line = string([]rune(line)[:77]) + "..."
	}
	return line
}

func ledgerShow(e cli.Env, db *idemops.DB, o *cli.Options, key string) int {
	rows, err := db.Show(e.Ctx, key, o.Job)
	if err != nil {
		return ledgerErr(e, "show", err)
	}
	if rows.Empty() {
		return ledgerErr(e, "show", fmt.Errorf("%s: %w", key, idemops.ErrNotFound))
	}
	if o.JSON {
		return printJSON(e, rows)
	}
	w := e.Stdout
	field := func(name, format string, a ...any) {
		fmt.Fprintf(w, "  %-13s %s\n", name, fmt.Sprintf(format, a...))
	}
	now := time.Now()
	for _, r := range rows.Effects {
		fmt.Fprintf(w, "effect %s\n", r.Key)
		field("job", "%s", r.Job)
		field("effect", "%s, version %d (job version %d)", r.Effect, r.EffectVersion, r.JobVersion)
		field("unit", "%s", r.UnitKey)
		field("state", "%s", effectStateText(r, now))
		field("attempts", "%s", attempts(r.Attempts, r.MaxAttempts, " of "))
		field("calls", "%s", r.ProviderCalls)
		if r.LeaseOwner != nil || r.LeaseUntil != nil {
			field("lease", "%s until %s", deref(r.LeaseOwner), timeText(r.LeaseUntil))
		}
		if r.NextAttemptAt != nil && (r.State == idemops.EffectPending || r.State == idemops.EffectLeased) {
			field("next attempt", "%s", retryText(*r.NextAttemptAt, now))
		}
		if r.ParkedReason != nil && r.State == idemops.EffectParked {
			field("parked for", "%s", *r.ParkedReason)
		}
		if r.State == idemops.EffectDone && deref(r.LastError) != "" {
			field("last error", "history, from an attempt before it was done: %s", deref(r.LastError))
		} else {
			field("last error", "%s", orNone(deref(r.LastError)))
		}
		if slices.Contains(r.Redacted, "result") {
			field("result", "%s", idemops.Redacted)
		} else {
			field("result", "%s", bytesText(r.Result))
		}
		field("created", "%s", stamp(r.CreatedAt))
		field("updated", "%s", stamp(r.UpdatedAt))
		field("done", "%s", timeText(r.DoneAt))
		field("payload", "%s", payloadText(r.Payload, slices.Contains(r.Redacted, "payload")))
	}
	for _, r := range rows.Units {
		fmt.Fprintf(w, "unit %s\n", r.Key)
		field("job", "%s", r.Job)
		field("state", "%s", unitStateText(r.State))
		field("attempts", "%s", attempts(r.Attempts, r.MaxAttempts, " of "))
		field("last error", "%s", r.LastError)
		if r.Mark != nil {
			field("mark", "%s", stamp(*r.Mark))
		}
		field("job version", "%d", r.JobVersion)
		field("first failed", "%s", stamp(r.FirstFailedAt))
		field("updated", "%s", stamp(r.UpdatedAt))
		field("payload", "%s", payloadText(r.Payload, r.PayloadRedacted))
	}
	for _, r := range rows.HandedIn {
		fmt.Fprintf(w, "handed-in key %s\n", r.Key)
		field("job", "%s", r.Job)
		field("job version", "%d", r.JobVersion)
		field("first seen", "%s", stamp(r.FirstSeen))
	}
	return cli.ExitOK
}

// payloadText is a stored payload as show prints it: [redacted] when the
// spec's redact hides it.
func payloadText(p []byte, redacted bool) string {
	if redacted {
		return idemops.Redacted
	}
	return string(p)
}

func effectStateText(r idemops.Effect, now time.Time) string {
	switch r.State {
	case idemops.EffectPending:
		return "pending: owed; the next run or drain performs it"
	case idemops.EffectLeased:
		return fmt.Sprintf("leased: owed, and held by %s for %s more; it may be calling the provider now", deref(r.LeaseOwner), r.LeaseUntil.Sub(now).Round(time.Second))
	case idemops.EffectParked:
		return "parked: nothing performs it until 'idemgen ledger retry' puts it back"
	}
	return r.State
}

func unitStateText(state string) string {
	switch state {
	case "failing":
		return "failing: progress waits for it, and each run tries it again"
	case "parked":
		return "parked: progress passed it; 'idemgen ledger retry' puts it back"
	case "retry":
		return "retry: put back; the next run (drain, for handed-in units) writes it from its payload"
	}
	return state
}

func timeText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// bytesText shows a kept result as text when it is printable, else in hex.
func bytesText(b []byte) string {
	if b == nil {
		return "none"
	}
	printable := utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && r != '\t' }) < 0
	if printable {
		return string(b)
	}
	return fmt.Sprintf("%d bytes: %x", len(b), b)
}

func ledgerRetry(e cli.Env, db *idemops.DB, pkg *generator.Package, o *cli.Options, args []string) int {
	var changes []idemops.Change
	var err error
	if o.AllParked {
		changes, err = db.RetryAllParked(e.Ctx, o.Job)
	} else {
		changes, err = db.Retry(e.Ctx, args[0], o.Job)
	}
	if err != nil {
		return ledgerErr(e, "retry", err)
	}
	if len(changes) == 0 {
		fmt.Fprintln(e.Stdout, "nothing is parked")
	}
	for _, c := range changes {
		next := "the next run or drain performs it"
		if c.Kind == "unit" {
			next = "the next run writes it"
			for _, j := range pkg.Jobs {
				if j.Name == c.Job && string(j.Source) == idemops.SourceNone {
					next = "the next drain writes it"
				}
			}
		}
		fmt.Fprintf(e.Stdout, "put back %s, %s after %s: %s\n", describe(c), c.State, plural(c.Attempts, "attempt"), next)
	}
	return cli.ExitOK
}

// ledgerLift lifts an effect's pause or closes its circuit by hand.
func ledgerLift(e cli.Env, db *idemops.DB, job, effect string) int {
	lifted, err := db.LiftGate(e.Ctx, job, effect)
	if err != nil {
		return ledgerErr(e, "lift", err)
	}
	if !lifted {
		fmt.Fprintf(e.Stdout, "effect %s of job %s is not paused, its circuit not open: nothing to lift\n", effect, job)
		return cli.ExitOK
	}
	fmt.Fprintf(e.Stdout, "lifted: effect %s of job %s calls its provider again from the next run or drain\n", effect, job)
	return cli.ExitOK
}

// ledgerLimit overrides an effect's rate and concurrency by hand, or
// puts the spec's back (-reset).
func ledgerLimit(e cli.Env, db *idemops.DB, o *cli.Options, job, effect string) int {
	by := whoSteers(o)
	if o.Reset {
		had, err := db.ResetLimits(e.Ctx, job, effect, by)
		if err != nil {
			return ledgerErr(e, "limit", err)
		}
		if !had {
			fmt.Fprintf(e.Stdout, "effect %s of job %s has no limits set by hand: its limits are the spec's\n", effect, job)
			return cli.ExitOK
		}
		fmt.Fprintf(e.Stdout, "reset: effect %s of job %s follows the spec's limits again (every worker within about a second)\n", effect, job)
		return cli.ExitOK
	}
	var over idem.LimitOverride
	if o.Rate != "" {
		rate, err := idemops.ParseRate(o.Rate)
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen ledger limit: -rate: %v\n", err)
			return cli.ExitUsage
		}
		over.Rate = rate
	}
	over.Concurrency, over.By = int32(o.Concurrency), by
	if err := db.SetLimits(e.Ctx, job, effect, over); err != nil {
		return ledgerErr(e, "limit", err)
	}
	got, err := db.Override(e.Ctx, job, effect)
	if err != nil || got == nil {
		return ledgerErr(e, "limit", cmp.Or(err, errors.New("the override is not there after it was set")))
	}
	fmt.Fprintf(e.Stdout, "%s; every worker follows within about a second\n", got.Text())
	return cli.ExitOK
}

// ledgerPause pauses an effect by hand, fleet-wide.
func ledgerPause(e cli.Env, db *idemops.DB, o *cli.Options, job, effect string) int {
	until, err := db.PauseByHand(e.Ctx, job, effect, o.For, whoSteers(o))
	if err != nil {
		return ledgerErr(e, "pause", err)
	}
	fmt.Fprintf(e.Stdout, "paused: no worker calls effect %s of job %s before %s; 'idemgen ledger lift %s %s' ends it early\n",
		effect, job, stamp(until), job, effect)
	return cli.ExitOK
}

// whoSteers is who limits, pauses or lifts an effect: -by, or the local
// user ($USER, then the account's name).
func whoSteers(o *cli.Options) string {
	if o.By != "" {
		return o.By
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "unknown"
}

func ledgerReset(e cli.Env, db *idemops.DB, o *cli.Options, key string) int {
	changes, err := db.Reset(e.Ctx, key, o.Job, !o.Force)
	if err != nil {
		return ledgerErr(e, "reset", err)
	}
	verb := "removed"
	if !o.Force {
		verb = "would remove"
	}
	for _, c := range changes {
		state := ""
		if c.State != "" {
			state = " (" + c.State + ")"
		}
		fmt.Fprintf(e.Stdout, "%s %s%s\n", verb, describe(c), state)
	}
	if !o.Force {
		fmt.Fprintf(e.Stderr, "idemgen ledger reset: nothing was removed: reset forgets keys for good; run it again with -force\n")
		return cli.ExitFail
	}
	return cli.ExitOK
}

// describe names a changed row: its kind, key and owner.
func describe(c idemops.Change) string {
	switch c.Kind {
	case "effect":
		return fmt.Sprintf("effect %s of %s/%s", c.Key, c.Job, c.Effect)
	case "unit":
		return fmt.Sprintf("unit %s of %s", c.Key, c.Job)
	}
	return fmt.Sprintf("handed-in key %s of %s", c.Key, c.Job)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// retryText says when a failed attempt's row may be tried again.
func retryText(at, now time.Time) string {
	if !at.After(now) {
		return fmt.Sprintf("%s (due: the next run or drain tries it)", stamp(at))
	}
	return fmt.Sprintf("%s (in %s: the backoff, or the provider's Retry-After)", stamp(at), at.Sub(now).Round(time.Second))
}

// shellQuote quotes s for a shell when it holds more than letters, digits
// and -_.:/@+=, so a printed flag value can be pasted as it is.
func shellQuote(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:/@+=", r)
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runUI serves the operations page (idem/idemui) on -addr until
// interrupted: read-only unless -allow-actions, and then authorized as
// the local user, whom the log names.
func UI(e cli.Env, args []string) int {
	var o cli.Options
	if _, code, ok := cli.ParseFlags(e, "ui", args, 0, &o); !ok {
		return code
	}
	if _, code := cli.OpsPackage(e, "ui", &o); code != cli.ExitOK {
		return code
	}
	if code := cli.CheckUIAddr(e, &o); code != cli.ExitOK {
		return code
	}
	db, _, code := openOps(e, "ui", &o)
	if code != cli.ExitOK {
		return code
	}
	defer db.Close()
	uiOpts := idemui.Options{ReadOnly: !o.AllowActions, Log: slog.New(slog.NewTextHandler(e.Stderr, nil))}
	if o.Redact {
		uiOpts.Redact = idemui.RedactAll
	}
	if o.AllowActions {
		who := "local user"
		if u, err := user.Current(); err == nil {
			who = "local user " + u.Username
		}
		uiOpts.Authorize = func(*http.Request, idemui.Action) (string, error) { return who, nil }
	}
	h, err := idemui.New(db, uiOpts)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen ui: %v\n", err)
		return cli.ExitUsage
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen ui: %v\n", err)
		return cli.ExitUsage
	}
	mode := "read-only"
	if o.AllowActions {
		mode = "actions allowed"
	}
	fmt.Fprintf(e.Stderr, "idemgen ui: serving http://%s/ (%s); interrupt to stop\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-e.Ctx.Done():
		// Requests under way get 5 s to finish.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(e.Stderr, "idemgen ui: %v\n", err)
		return cli.ExitFail
	}
	return cli.ExitOK
}
