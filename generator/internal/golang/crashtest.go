package golang

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// CrashTestFile emits one crash-simulation test per job, wiring the job
// into the runtime's harness (idem/crashsim):
//
//	func TestCrashSimInvoiceSync(t *testing.T) { job := &simJob[Invoice]{...}; ... simulate(t, env, job) }
func CrashTestFile(p *model.Package) *jen.File {
	f := newFile(p.Name)
	for _, j := range p.Jobs {
		crashTest(f, p, j)
	}
	adoptedStandIn(f, p)
	adoptedMisfitsTest(f, p)
	simPublisher(f, p)
	return f
}

func crashTest(f *jen.File, p *model.Package, j *model.Job) {
	crashPoints(f, j)
	unit := j.Unit.GoName
	lease := model.DefaultLease
	for _, e := range j.Effects {
		lease = max(lease, e.Lease)
	}
	def := jen.Dict{
		jen.Id("Name"):       jen.Lit(j.Name),
		jen.Id("Source"):     jen.Lit(string(j.Source)),
		jen.Id("Version"):    jen.Lit(j.Version),
		jen.Id("Points"):     jen.Id(j.Lower() + "CrashPoints"),
		jen.Id("Key"):        jen.Lit(j.Key.Text),
		jen.Id("Fields"):     simFields(j),
		jen.Id("InsertOnce"): jen.Lit(j.Dest != nil && j.Dest.Write == model.InsertOnce),
		jen.Id("HasDest"):    jen.Lit(j.Dest != nil),
		jen.Id("Stage"):      jen.Lit(j.Dest != nil && j.Dest.Stage),
		jen.Id("Lease"):      durationLit(lease),
		jen.Id("Unit"):       simUnitFunc(j),
		jen.Id("NewJob"):     simNewJob(j),
		jen.Id("Tables"):     jen.Id("ledgerTables"),
	}
	if j.Unit.MaxAttempts > 0 {
		def[jen.Id("UnitMaxAttempts")] = jen.Lit(j.Unit.MaxAttempts)
	}
	if c := j.Consume; c != nil {
		// Broker: "nats", Headers: map[string]string{"event_id": "Nats-Msg-Id"}
		def[jen.Id("Broker")] = jen.Lit(string(c.Broker))
		if len(c.Headers) > 0 {
			def[jen.Id("Headers")] = jen.Map(jen.String()).String().Values(jen.DictFunc(func(d jen.Dict) {
				for _, h := range c.Headers {
					d[jen.Lit(h.Field.Name)] = jen.Lit(h.Header)
				}
			}))
		}
	}
	if j.Dest != nil && j.Dest.NewerWins != nil {
		def[jen.Id("NewerWins")] = jen.Lit(j.Dest.NewerWins.Name)
	}
	if j.Watermark != nil {
		def[jen.Id("Overlap")] = durationLit(j.Overlap)
		def[jen.Id("MarkOf")] = jen.Func().Params(jen.Id("u").Id(unit)).Add(Time()).Block(jen.Return(jen.Id("u").Dot(j.Watermark.GoName)))
		def[jen.Id("SetMark")] = jen.Func().Params(jen.Id("u").Op("*").Id(unit), jen.Id("t").Add(Time())).Block(jen.Id("u").Dot(j.Watermark.GoName).Op("=").Id("t"))
	}
	if j.Dest != nil {
		def[jen.Id("Rows")] = jen.Func().Params(jen.Id("ctx").Add(Context()), jen.Id("st").Add(rt("Store"))).Params(jen.Index().Id(unit), jen.Error()).Block(
			jen.Return(jen.Id("st").Dot("Auto").Call().Assert(jen.Id("destQuerier")).Dot("list" + j.GoName).Call(jen.Id("ctx"))))
	}
	if len(j.Effects) > 0 {
		def[jen.Id("Effects")] = jen.Index().Add(sim("Effect")).ValuesFunc(func(g *jen.Group) {
			for _, e := range j.Effects {
				d := jen.Dict{
					jen.Id("Name"):        jen.Lit(e.Name),
					jen.Id("When"):        whenConst(e.When),
					jen.Id("Key"):         jen.Lit(e.Key.Text),
					jen.Id("Version"):     jen.Lit(e.Version),
					jen.Id("KeepResult"):  jen.Lit(e.KeepResult),
					jen.Id("MaxAttempts"): jen.Lit(e.MaxAttempts),
					jen.Id("Retention"):   durationLit(e.Retention),
					jen.Id("Lease"):       durationLit(e.Lease),
				}
				callLimits(d, e)
				g.Values(d)
			}
		})
	}
	name := "TestCrashSim" + j.GoName
	f.Commentf("%s crashes the %s job at every durable boundary, restarts it and checks", name, j.Name)
	f.Comment("the guarantees of docs/guarantees.md in github.com/idemgen/idemgen, which names the")
	f.Comment("scenario family that proves each one (the harness is idem/crashsim).")
	f.Func().Id(name).Params(jen.Id("t").Op("*").Qual("testing", "T")).BlockFunc(func(g *jen.Group) {
		g.Id("job").Op(":=").Op("&").Add(sim("Job")).Types(jen.Id(unit)).Values(def)
		// Every package's crash simulation plays on SQLite, its store a
		// test-only one when the spec names no SQLite (sqlgen.TestOnly):
		// a green go test never stands on a skipped proof.
		g.Id("t").Dot("Run").Call(jen.Lit("sqlite"), jen.Func().Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
			sim("Run").Call(jen.Id("t"), sim("SQLite").Call(jen.Id("t"),
				jen.Func().Params(jen.Id("db").Op("*").Add(SQLDB())).Add(sim("Store")).Block(jen.Return(simStore(p, model.SQLite)))), jen.Id("job")),
		))
		if p.Has(model.Postgres) {
			// Without a PostgreSQL named the variant is not started, and
			// the test says so: no subtest reports SKIP beside a proof
			// that ran. (Asked of the environment, not of crashsim.Postgres,
			// which would open a connection in every SQLite child too.)
			g.If(jen.Qual("os", "Getenv").Call(jen.Lit("IDEMGEN_TEST_POSTGRES")).Op("==").Lit("")).Block(
				jen.Id("t").Dot("Log").Call(jen.Lit("postgres: not run, IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run this variant")),
				jen.Return(),
			)
			g.Id("t").Dot("Run").Call(jen.Lit("postgres"), jen.Func().Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
				sim("Run").Call(jen.Id("t"), sim("Postgres").Call(jen.Id("t"),
					jen.Func().Params(jen.Id("pool").Op("*").Add(PgxPool())).Add(sim("Store")).Block(jen.Return(simStore(p, model.Postgres)))), jen.Id("job")),
			))
		}
	})
}

// simNewJob builds the job for one incarnation, each effect calling the fake provider.
func simNewJob(j *model.Job) *jen.Statement {
	unit := j.Unit.GoName
	verbs := sim("Verbs").Types(jen.Id(unit))
	args := []jen.Code{jen.Op("&").Id("Store").Values(jen.Dict{jen.Id("st"): jen.Id("st")})}
	switch j.Source {
	case model.SourceWatermark:
		args = append(args, jen.Id("src").Assert(jen.Op("*").Add(sim("WindowSource")).Types(jen.Id(unit))))
	case model.SourceCursor:
		args = append(args, jen.Id("src").Assert(jen.Op("*").Add(sim("CursorSource")).Types(jen.Id(unit))))
	}
	if len(j.Effects) > 0 {
		var fields []jen.Code
		for _, e := range j.Effects {
			if e.Publish != nil {
				fields = append(fields, jen.Id(e.GoName).Op(":").Id(simPublisherName).Values(jen.Dict{jen.Id("fx"): jen.Id("fx"), jen.Id("effect"): jen.Lit(e.Name)}))
				continue
			}
			call := jen.Id("fx").Dot("Call").Call(jen.Id("ctx"), jen.Lit(e.Name), jen.Id("key"))
			body := jen.List(jen.Id("_"), jen.Id("err")).Op(":=").Add(call).Line().Return(jen.Id("err"))
			if e.KeepResult {
				body = jen.Return(call)
			}
			fields = append(fields, jen.Id(e.GoName).Op(":").Id(e.GoName+"Func").Call(jen.Func().Params(effectParams(j)...).Add(effectResults(e)).Block(body)))
		}
		args = append(args, jen.Id(effectsName(j)).Add(multiValues(fields...)))
	}
	args = append(args, jen.Id("opts").Op("..."))
	v := jen.Dict{jen.Id("Process"): jen.Id("j").Dot("Process"), jen.Id("Drain"): jen.Id("j").Dot("Drain"), jen.Id("Purge"): jen.Id("j").Dot("Purge")}
	if j.Dest != nil {
		v[jen.Id("Stale")] = jen.Id("j").Dot("Stale")
	}
	if j.Source != model.SourceNone {
		v[jen.Id("Run")] = jen.Id("j").Dot("Run")
	}
	if j.Source == model.SourceWatermark {
		v[jen.Id("Backfill")] = jen.Id("j").Dot("Backfill")
	}
	if j.Consume != nil {
		v[jen.Id("ConsumeFrom")] = jen.Id("j").Dot("ConsumeFrom")
	}
	return jen.Func().Params(jen.Id("st").Add(rt("Store")), jen.Id("src").Any(), jen.Id("fx").Op("*").Add(sim("Provider")), jen.Id("opts").Op("...").Add(rt("Option"))).
		Params(verbs.Clone(), jen.Error()).Block(
		jen.List(jen.Id("j"), jen.Id("err")).Op(":=").Id("New"+j.GoName).Call(args...),
		jen.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(verbs.Clone().Values(), jen.Id("err"))),
		jen.Return(verbs.Clone().Values(v), jen.Nil()),
	)
}

// simUnitFunc emits the fixture: unit id at revision rev. Key fields vary
// with id only (string ones adversarially, see crashsim.KeyText), other fields
// with both, and units 5 and 6 share every value outside the key; the
// watermark lands in the window of the phase that serves it; nullable data
// fields go NULL at rev 2.
func simUnitFunc(j *model.Job) *jen.Statement {
	inKey := map[*model.Field]bool{}
	for _, f := range j.Key.Fields() {
		inKey[f] = true
	}
	id, rev, vid := jen.Id("id"), jen.Id("rev"), jen.Id("vid")
	return jen.Func().Params(jen.List(jen.Id("id"), jen.Id("rev")).Int()).Id(j.Unit.GoName).BlockFunc(func(g *jen.Group) {
		g.Var().Id("u").Id(j.Unit.GoName)
		if len(inKey) < len(j.Unit.Fields) {
			g.Comment("Units 5 and 6 share every value outside the key.")
			g.Id("vid").Op(":=").Id("id")
			g.If(jen.Id("id").Op("==").Lit(6)).Block(jen.Id("vid").Op("=").Lit(5))
		}
		for _, f := range j.Unit.Fields {
			var v *jen.Statement
			switch {
			case j.Watermark == f:
				v = sim("Mark").Call(vid.Clone(), rev.Clone())
			case inKey[f] && f.Type == model.String:
				v = sim("KeyText").Call(jen.Lit(j.Key.Text), jen.Lit(f.Name), id.Clone())
			case inKey[f]:
				v = simValue(f, id.Clone(), jen.Lit(0))
			default:
				v = simValue(f, vid.Clone(), rev.Clone())
			}
			target := jen.Id("u").Dot(f.GoName)
			if !f.Pointer() {
				g.Add(target).Op("=").Add(v)
				continue
			}
			set := jen.Block(jen.Id("v").Op(":=").Add(v), target.Clone().Op("=").Op("&").Id("v"))
			if inKey[f] || (j.Dest != nil && j.Dest.NewerWins == f) {
				g.Add(set)
			} else {
				g.If(jen.Id("rev").Op("==").Lit(1)).Add(set)
			}
		}
		g.Return(jen.Id("u"))
	})
}

// simValue is a deterministic value of f's type from (id, rev).
func simValue(f *model.Field, id, rev *jen.Statement) *jen.Statement {
	n := jen.Parens(id.Clone().Op("*").Lit(100).Op("+").Add(rev.Clone()))
	switch f.Type {
	case model.String:
		return jen.Qual("fmt", "Sprintf").Call(jen.Lit(fmt.Sprintf("%s-%%d.%%d", f.Name)), id, rev)
	case model.Int32:
		return jen.Int32().Call(n)
	case model.Int64:
		return jen.Int64().Call(n)
	case model.Float64:
		return jen.Float64().Call(n).Op("/").Lit(4)
	case model.Bool:
		return n.Op("%").Lit(2).Op("==").Lit(0)
	case model.Time:
		return sim("Base").Dot("Add").Call(jen.Qual("time", "Duration").Call(n).Op("*").Qual("time", "Minute"))
	case model.Bytes:
		return jen.Index().Byte().Values(jen.Byte().Call(id), jen.Byte().Call(rev))
	case model.JSON:
		// PostgreSQL's jsonb canonical form, so values compare after a round trip.
		return jen.Qual(jsonPkg, "RawMessage").Call(jen.Qual("fmt", "Sprintf").Call(jen.Lit(`{"id": %d, "rev": %d}`), id, rev))
	default: // uuid
		return jen.Qual(uuidPkg, "UUID").Values(jen.Lit(0).Op(":").Byte().Call(id), jen.Lit(1).Op(":").Byte().Call(rev))
	}
}

// simFields emits the unit's fields as the spec declares them:
//
//	[]simField{{name: "invoice_id", typ: "string", inKey: true}, ...}
func simFields(j *model.Job) *jen.Statement {
	inKey := map[*model.Field]bool{}
	for _, f := range j.Key.Fields() {
		inKey[f] = true
	}
	return jen.Index().Add(sim("Field")).ValuesFunc(func(g *jen.Group) {
		for _, f := range j.Unit.Fields {
			d := jen.Dict{jen.Id("Name"): jen.Lit(f.Name), jen.Id("Type"): jen.Lit(string(f.Type))}
			if f.Nullable {
				d[jen.Id("Nullable")] = jen.True()
			}
			if inKey[f] {
				d[jen.Id("InKey")] = jen.True()
			}
			g.Values(d)
		}
	})
}

// crashPoints emits the job's crash points, in the order a run meets them,
// into the crash test file: they are the test package idemtest's, which
// production code never imports:
//
//	var invoiceSyncCrashPoints = []idemtest.CrashPoint{idemtest.PointRunStart, ...}
func crashPoints(f *jen.File, j *model.Job) {
	points := []string{"PointRunStart"}
	if j.Source != model.SourceNone {
		points = append(points, "PointBatchStart")
	}
	points = append(points, "PointBatchBegin", "PointUnitStart", "PointBatchWritten", "PointUnitBeforeCommit", "PointUnitAfterCommit")
	if len(j.Effects) > 0 {
		points = append(points, "PointEffectClaimed", "PointEffectBeforeCall", "PointEffectAfterCall", "PointEffectRecorded")
	}
	if j.Source != model.SourceNone {
		points = append(points, "PointProgressBefore", "PointProgressAfter")
	}
	f.Commentf("%sCrashPoints are the durable boundaries of the %s job, where the crash tests stop it.", j.Lower(), j.Name)
	var items []jen.Code
	for _, p := range points {
		items = append(items, jen.Qual(idemtestPkg, p))
	}
	f.Var().Id(j.Lower() + "CrashPoints").Op("=").Index().Add(jen.Qual(idemtestPkg, "CrashPoint")).Add(multiValues(items...))
}
