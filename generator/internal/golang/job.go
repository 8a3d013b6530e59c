package golang

import (
	"fmt"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// JobFile emits everything one job declares: its unit, key, source and
// effect interfaces, and the job type with its verbs.
func JobFile(p *model.Package, j *model.Job) *jen.File {
	f := newFile(p.Name)
	unitStruct(f, j)
	unitKey(f, j)
	unitCheckKey(f, j)
	unitCanonical(f, j)
	sourceInterface(f, j)
	for _, e := range j.Effects {
		if e.Publish == nil {
			effectInterface(f, j, e)
		}
		effectKey(f, j, e)
	}
	effectsStruct(f, j)
	jobType(f, j)
	jobConstructor(f, j)
	jobVerbs(f, j)
	processTxVerbs(f, p, j) // a River job's args and InsertTx are in the River file (RiverFile)
	consumer(f, j)
	return f
}

func sourceName(j *model.Job) string  { return j.GoName + "Source" }
func effectsName(j *model.Job) string { return j.GoName + "Effects" }

// sourceInterface emits the typed source:
//
//	type InvoiceSyncSource interface {
//		Fetch(ctx context.Context, w Window, page string) (units []Invoice, next string, err error)
//	}
func sourceInterface(f *jen.File, j *model.Job) {
	unit := j.Unit.GoName
	switch j.Source {
	case model.SourceWatermark:
		f.Commentf("%s fetches %s units for the %s job.", sourceName(j), unit, j.Name)
		f.Type().Id(sourceName(j)).Interface(
			jen.Commentf("Fetch returns the units whose %s lies in w, one page at a time:", j.Watermark.Name).Line().
				Comment("page is \"\" for the first page, and next is \"\" after the last.").Line().
				Id("Fetch").Params(jen.Id("ctx").Add(Context()), jen.Id("w").Add(rt("Window")), jen.Id("page").String()).
				Params(jen.Id("units").Index().Id(unit), jen.Id("next").String(), jen.Id("err").Error()),
		)
	case model.SourceCursor:
		f.Commentf("%s fetches %s units for the %s job.", sourceName(j), unit, j.Name)
		f.Type().Id(sourceName(j)).Interface(
			jen.Comment("Fetch returns the page after cursor (\"\" for the start) and the cursor that").Line().
				Comment("follows it; next is \"\" when there is nothing further yet.").Line().
				Id("Fetch").Params(jen.Id("ctx").Add(Context()), jen.Id("cursor").String()).
				Params(jen.Id("units").Index().Id(unit), jen.Id("next").String(), jen.Id("err").Error()),
		)
	}
}

func effectResults(e *model.Effect) *jen.Statement {
	if e.KeepResult {
		return jen.Params(jen.Index().Byte(), jen.Error())
	}
	return jen.Error()
}

func effectParams(j *model.Job) []jen.Code {
	return []jen.Code{jen.Id("ctx").Add(Context()), jen.Id("key").String(), jen.Id("unit").Id(j.Unit.GoName)}
}

// effectInterface emits the typed effect and its func adapter:
//
//	type NotifyNewInvoice interface {
//		NotifyNewInvoice(ctx context.Context, key string, unit Invoice) error
//	}
//	type NotifyNewInvoiceFunc func(ctx context.Context, key string, unit Invoice) error
func effectInterface(f *jen.File, j *model.Job, e *model.Effect) {
	f.Commentf("%s performs the %s effect of the %s job. key is the effect's", e.GoName, e.Name, j.Name)
	f.Comment("idempotency key: pass it to the provider (Stripe's Idempotency-Key, say) so a")
	f.Comment("retry after a crash is recognised there too.")
	if e.KeepResult {
		f.Comment("The result is kept in the ledger and returned on replay instead of acting again.")
	}
	f.Type().Id(e.GoName).Interface(
		jen.Id(e.GoName).Params(effectParams(j)...).Add(effectResults(e)),
	)
	fn := e.GoName + "Func"
	f.Commentf("%s adapts a function to %s.", fn, e.GoName)
	f.Type().Id(fn).Func().Params(effectParams(j)...).Add(effectResults(e))
	f.Commentf("%s calls fn.", e.GoName)
	args := []jen.Code{jen.Id("ctx"), jen.Id("key"), jen.Id("unit")}
	f.Func().Params(jen.Id("fn").Id(fn)).Id(e.GoName).Params(effectParams(j)...).Add(effectResults(e)).Block(
		jen.Return(jen.Id("fn").Call(args...)),
	)
}

// effectsStruct emits the providers a job needs:
//
//	type InvoiceSyncEffects struct{ NotifyNewInvoice NotifyNewInvoice }
func effectsStruct(f *jen.File, j *model.Job) {
	f.Commentf("%s holds the providers of the %s job's effects; all are required.", effectsName(j), j.Name)
	f.Type().Id(effectsName(j)).StructFunc(func(g *jen.Group) {
		for _, e := range j.Effects {
			if e.Publish != nil {
				publishDoc(g, e)
			}
			g.Id(e.GoName).Add(effectProvider(e))
		}
	})
}

// jobType emits the job:
//
//	type InvoiceSync struct { e *engine[Invoice]; src InvoiceSyncSource }
func jobType(f *jen.File, j *model.Job) {
	if j.Doc != "" {
		docLines(f, fmt.Sprintf("%s runs the %s job (version %d). %s", j.GoName, j.Name, j.Version, j.Doc))
	} else {
		f.Commentf("%s runs the %s job (version %d).", j.GoName, j.Name, j.Version)
	}
	f.Type().Id(j.GoName).StructFunc(func(g *jen.Group) {
		g.Id("e").Op("*").Add(rt("Engine")).Types(jen.Id(j.Unit.GoName))
		if j.Source != model.SourceNone {
			g.Id("src").Id(sourceName(j))
		}
	})
}

// whenConst is the runtime's constant for when an effect is decided: idemrt.WhenInserted, ...
func whenConst(w model.When) *jen.Statement {
	return rt(map[model.When]string{model.WhenInserted: "WhenInserted", model.WhenChanged: "WhenChanged", model.WhenAlways: "WhenAlways"}[w])
}

// jobConstructor emits NewInvoiceSync, which checks its arguments and wires
// the job definition into the engine.
func jobConstructor(f *jen.File, j *model.Job) {
	unit := j.Unit.GoName
	params := []jen.Code{jen.Id("store").Op("*").Id("Store")}
	if j.Source != model.SourceNone {
		params = append(params, jen.Id("src").Id(sourceName(j)))
	}
	if len(j.Effects) > 0 {
		params = append(params, jen.Id("fx").Id(effectsName(j)))
	}
	params = append(params, jen.Id("opts").Op("...").Add(rt("Option")))
	f.Commentf("New%s returns the %s job over store.", j.GoName, j.Name)
	f.Func().Id("New"+j.GoName).Params(params...).Params(jen.Op("*").Id(j.GoName), jen.Error()).BlockFunc(func(g *jen.Group) {
		g.If(jen.Id("store").Op("==").Nil()).Block(
			jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("job %q: nil store", j.Name)))))
		if j.Source != model.SourceNone {
			g.If(jen.Id("src").Op("==").Nil()).Block(
				jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("job %q: nil source", j.Name)))))
		}
		for _, e := range j.Effects {
			g.If(jen.Id("fx").Dot(e.GoName).Op("==").Nil()).Block(
				jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("job %q: no provider for effect %q", j.Name, e.Name)))))
		}
		def := jen.Dict{
			jen.Id("Name"):      jen.Lit(j.Name),
			jen.Id("Version"):   jen.Lit(j.Version),
			jen.Id("KeyOf"):     jen.Id(unit).Dot("Key"),
			jen.Id("CheckKey"):  jen.Id(unit).Dot("checkKey"),
			jen.Id("Canonical"): jen.Id(unit).Dot("canonical"),
			jen.Id("CheckSeen"): jen.Lit(j.Source == model.SourceNone),
		}
		if j.Dest != nil && j.Dest.Stage {
			def[jen.Id("Stage")] = jen.True()
		}
		if j.Unit.MaxAttempts > 0 {
			def[jen.Id("MaxAttempts")] = jen.Lit(j.Unit.MaxAttempts)
		}
		if j.Watermark != nil {
			def[jen.Id("MarkOf")] = markOfFunc(j)
		}
		if j.Dest != nil {
			def[jen.Id("Write")] = jen.Func().Params(
				jen.Id("ctx").Add(Context()), jen.Id("q").Add(rt("Querier")), jen.Id("u").Id(unit),
				jen.Id("key").String(), jen.Id("v").Int32(),
			).Params(rt("Outcome"), jen.Error()).Block(
				jen.Return(jen.Id("q").Assert(jen.Id("destQuerier")).Dot("write"+j.GoName).Call(
					jen.Id("ctx"), jen.Id("u"), jen.Id("key"), jen.Id("v"))),
			)
			def[jen.Id("WriteBatch")] = jen.Func().Params(
				jen.Id("ctx").Add(Context()), jen.Id("q").Add(rt("Querier")), jen.Id("us").Index().Id(unit),
				jen.Id("keys").Index().String(), jen.Id("v").Int32(),
			).Params(jen.Index().Add(rt("Outcome")), jen.Error()).Block(
				jen.Return(jen.Id("q").Assert(jen.Id("destQuerier")).Dot("write"+j.GoName+"Batch").Call(
					jen.Id("ctx"), jen.Id("us"), jen.Id("keys"), jen.Id("v"))),
			)
		}
		if j.ComparesReplays() {
			def[jen.Id("Holds")] = jen.Func().Params(
				jen.Id("ctx").Add(Context()), jen.Id("q").Add(rt("Querier")), jen.Id("u").Id(unit),
			).Params(jen.Bool(), jen.Error()).Block(
				jen.Return(jen.Id("q").Assert(jen.Id("destQuerier")).Dot("holds"+j.GoName).Call(jen.Id("ctx"), jen.Id("u"))),
			)
		}
		if len(j.Effects) > 0 {
			def[jen.Id("Effects")] = jen.Index().Add(rt("Effect")).Types(jen.Id(unit)).ValuesFunc(func(g *jen.Group) {
				for _, e := range j.Effects {
					g.Add(effectDef(j, e))
				}
			})
		}
		g.Id("def").Op(":=").Op("&").Add(rt("Job")).Types(jen.Id(unit)).Values(def)
		g.List(jen.Id("e"), jen.Id("err")).Op(":=").Add(rt("NewEngine")).Call(jen.Id("def"), jen.Id("store").Dot("st"), jen.Id("opts"))
		g.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("job %q: %%w", j.Name)), jen.Id("err"))))
		job := jen.Dict{jen.Id("e"): jen.Id("e")}
		if j.Source != model.SourceNone {
			job[jen.Id("src")] = jen.Id("src")
		}
		g.Return(jen.Op("&").Id(j.GoName).Values(job), jen.Nil())
	})
}

func effectDef(j *model.Job, e *model.Effect) *jen.Statement {
	call := jen.Func().Params(effectParams(j)...).Params(jen.Index().Byte(), jen.Error())
	if e.Publish != nil {
		call = publishCall(j, e)
	} else if e.KeepResult {
		call = call.Block(jen.Return(jen.Id("fx").Dot(e.GoName).Dot(e.GoName).Call(jen.Id("ctx"), jen.Id("key"), jen.Id("unit"))))
	} else {
		call = call.Block(jen.Return(jen.Nil(), jen.Id("fx").Dot(e.GoName).Dot(e.GoName).Call(jen.Id("ctx"), jen.Id("key"), jen.Id("unit"))))
	}
	d := jen.Dict{
		jen.Id("Name"):        jen.Lit(e.Name),
		jen.Id("Version"):     jen.Lit(e.Version),
		jen.Id("When"):        whenConst(e.When),
		jen.Id("KeyOf"):       jen.Id(e.GoName + "Key"),
		jen.Id("Lease"):       durationLit(e.Lease),
		jen.Id("KeepResult"):  jen.Lit(e.KeepResult),
		jen.Id("MaxAttempts"): jen.Lit(e.MaxAttempts),
		jen.Id("Call"):        call,
	}
	if e.Retention > 0 {
		d[jen.Id("Retention")] = durationLit(e.Retention)
	}
	callLimits(d, e)
	return jen.Values(d)
}

// callLimits adds to an effect's fields the bounds on its provider calls
// that the spec sets, and nothing for those it leaves out:
//
//	Retry:       idemrt.Backoff{Initial: 2 * time.Second, Max: 10 * time.Minute},
//	Timeout:     30 * time.Second,
//	Rate:        idemrt.Rate{N: 50, Per: time.Second},
//	Concurrency: 8,
//	Circuit:     idemrt.Circuit{Failures: 5, CoolDown: 30 * time.Second},
func callLimits(d jen.Dict, e *model.Effect) {
	if r := e.Retry; r != (model.Backoff{}) {
		b := jen.Dict{}
		if r.Initial > 0 {
			b[jen.Id("Initial")] = durationLit(r.Initial)
		}
		if r.Max > 0 {
			b[jen.Id("Max")] = durationLit(r.Max)
		}
		d[jen.Id("Retry")] = rt("Backoff").Values(b)
	}
	if e.Timeout > 0 {
		d[jen.Id("Timeout")] = durationLit(e.Timeout)
	}
	if r := e.Rate; r.N > 0 {
		d[jen.Id("Rate")] = rt("Rate").Values(jen.Dict{jen.Id("N"): jen.Lit(int(r.N)), jen.Id("Per"): periodLit(r.Per)})
	}
	if e.Concurrency > 0 {
		d[jen.Id("Concurrency")] = jen.Lit(e.Concurrency)
	}
	if c := e.Circuit; c.Failures > 0 {
		circuit := jen.Dict{jen.Id("Failures"): jen.Lit(int(c.Failures)), jen.Id("CoolDown"): durationLit(c.CoolDown)}
		if c.MaxCoolDown > 0 {
			circuit[jen.Id("MaxCoolDown")] = durationLit(c.MaxCoolDown)
		}
		d[jen.Id("Circuit")] = rt("Circuit").Values(circuit)
	}
}

// periodLit writes a rate's period as its unit, time.Second, time.Minute or
// time.Hour, and any other duration as durationLit does.
func periodLit(d time.Duration) *jen.Statement {
	switch d {
	case time.Second:
		return jen.Qual("time", "Second")
	case time.Minute:
		return jen.Qual("time", "Minute")
	case time.Hour:
		return jen.Qual("time", "Hour")
	}
	return durationLit(d)
}

// markOfFunc emits a watermark job's watermark field as a function:
//
//	func(u Invoice) time.Time { return u.UpdatedAt }
func markOfFunc(j *model.Job) *jen.Statement {
	return jen.Func().Params(jen.Id("u").Id(j.Unit.GoName)).Add(Time()).Block(jen.Return(jen.Id("u").Dot(j.Watermark.GoName)))
}

func recv(j *model.Job) *jen.Statement { return jen.Params(jen.Id("j").Op("*").Id(j.GoName)) }

// jobVerbs emits Run, Backfill, Process, Drain, Purge and Stale as they apply.
func jobVerbs(f *jen.File, j *model.Job) {
	ctx := jen.Id("ctx").Add(Context())
	report := jen.Params(rt("Report"), jen.Error())
	switch j.Source {
	case model.SourceWatermark:
		markOf := markOfFunc(j)
		f.Commentf("Run performs owed effects, then fetches the window from the stored watermark minus the")
		f.Commentf("overlap (%s) to now, applies it, and only then advances the watermark.", j.Overlap)
		f.Comment(failuresDoc)
		f.Func().Add(recv(j)).Id("Run").Params(ctx.Clone()).Add(report.Clone()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot("RunWatermark").Call(jen.Id("ctx"), durationLit(j.Overlap), jen.Id("j").Dot("src").Dot("Fetch"), markOf.Clone())),
		)
		f.Comment("Backfill re-runs a past window through the same keys and ledger: rows converge,")
		f.Comment("effects already performed are not repeated, and the watermark does not move.")
		f.Comment(failuresDoc)
		f.Func().Add(recv(j)).Id("Backfill").Params(ctx.Clone(), jen.Id("w").Add(rt("Window"))).Add(report.Clone()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot("Backfill").Call(jen.Id("ctx"), jen.Id("w"), jen.Id("j").Dot("src").Dot("Fetch"), markOf.Clone())),
		)
	case model.SourceCursor:
		f.Comment("Run performs owed effects, then applies pages from the stored cursor; the cursor")
		f.Comment("advances only after its whole page is applied.")
		f.Comment(failuresDoc)
		f.Func().Add(recv(j)).Id("Run").Params(ctx.Clone()).Add(report.Clone()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot("RunCursor").Call(jen.Id("ctx"), jen.Id("j").Dot("src").Dot("Fetch"))),
		)
	}
	processDoc(f, j)
	f.Func().Add(recv(j)).Id("Process").Params(ctx.Clone(), jen.Id("units").Op("...").Id(j.Unit.GoName)).Add(report.Clone()).Block(
		jen.Return(jen.Id("j").Dot("e").Dot("Process").Call(jen.Id("ctx"), jen.Id("units"))),
	)
	f.Comment("Drain performs every effect still owed by earlier runs: crashed, failed or leased out.")
	f.Comment(failuresDoc)
	f.Func().Add(recv(j)).Id("Drain").Params(ctx.Clone()).Add(report.Clone()).Block(
		jen.Return(jen.Id("j").Dot("e").Dot("Drain").Call(jen.Id("ctx"))),
	)
	f.Comment("Purge deletes done ledger rows older than each effect's retention and returns how many.")
	f.Func().Add(recv(j)).Id("Purge").Params(ctx.Clone()).Params(jen.Int64(), jen.Error()).Block(
		jen.Return(jen.Id("j").Dot("e").Dot("Purge").Call(jen.Id("ctx"))),
	)
	if j.Dest != nil {
		f.Commentf("Rows reads every %s row back as units, ordered by the unique key (for checks", j.Dest.Table)
		f.Comment("and small tables: it loads them all).")
		f.Func().Add(recv(j)).Id("Rows").Params(ctx.Clone()).Params(jen.Index().Id(j.Unit.GoName), jen.Error()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot("Store").Call().Dot("Auto").Call().Assert(jen.Id("destQuerier")).Dot("list" + j.GoName).Call(jen.Id("ctx"))),
		)
		f.Commentf("Stale returns the keys of up to limit %s rows last computed by an older job", j.Dest.Table)
		f.Commentf("version than %d, so they can be found and recomputed (Backfill, or Process).", j.Version)
		f.Func().Add(recv(j)).Id("Stale").Params(ctx.Clone(), jen.Id("limit").Int()).Params(jen.Index().String(), jen.Error()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot("Store").Call().Dot("Auto").Call().Assert(jen.Id("destQuerier")).Dot("stale"+j.GoName).Call(
				jen.Id("ctx"), jen.Int32().Call(jen.Id("j").Dot("e").Dot("Job").Call().Dot("Version")), jen.Int32().Call(jen.Id("limit")))),
		)
	}
}

// failuresDoc is how every verb that applies units or performs effects reports failures.
const failuresDoc = "A unit or effect that failed does not stop it; it returns them as a *idem.FailuresError."

// processDoc says what Process does with a repeated key on this job, which
// depends on its source and destination.
func processDoc(f *jen.File, j *model.Job) {
	f.Comment("Process applies handed-in units (a queue message, a webhook) and reports each one")
	f.Comment("in the Report's Units. It returns a *idem.FailuresError when any unit or effect did")
	f.Comment("not end applied or deduped (errors.Is finds idem.ErrPayloadMismatch, ErrWriteFailed,")
	f.Comment("ErrEmptyKey, ErrEffectFailed, ErrEffectParked, ErrBusy in it).")
	switch {
	case j.Source == model.SourceNone:
		f.Comment("A repeated key with the same payload is deduped, returning the kept results; with a")
		f.Comment("different payload it is a mismatch (idem.ErrPayloadMismatch), never silently dropped.")
	case j.Dest != nil && j.Dest.Write == model.InsertOnce:
		f.Commentf("As in Run, a key already in %s is deduped whatever its payload: there is no", j.Dest.Table)
		f.Comment("mismatch check outside source: none jobs.")
	case j.Dest != nil && j.Dest.NewerWins != nil:
		f.Commentf("As in Run, an older copy of a key (by %s) leaves the newer row as it is and", j.Dest.NewerWins.Name)
		f.Comment("reports it unchanged, not a mismatch: only source: none jobs check payloads.")
	case j.Dest != nil:
		f.Comment("As in Run, a repeated key overwrites its row with the payload handed in last; there is")
		f.Comment("no mismatch check outside source: none jobs.")
	}
}
