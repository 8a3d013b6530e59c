package golang

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// The River packages generated code imports, only for jobs with river:.
const (
	riverPkg     = "github.com/riverqueue/river"
	idemriverPkg = "github.com/idemgen/idemgen/idem/idemriver"
)

func rv(name string) *jen.Statement  { return jen.Qual(riverPkg, name) }
func irv(name string) *jen.Statement { return jen.Qual(idemriverPkg, name) }

func unitArgsName(j *model.Job) string  { return j.GoName + "Args" }
func runArgsName(j *model.Job) string   { return j.GoName + "RunArgs" }
func drainArgsName(j *model.Job) string { return j.GoName + "DrainArgs" }

// riverJob emits, into the River file (so that a job's own file imports no
// River), a River job's args types, the job's InsertTx and InsertManyTx
// (handed-in units) and nothing else: the workers are the runtime's
// (idem/idemriver), registered by AddRiverWorkers.
//
//	// PaymentWebhookArgs is the River job of one handed-in payment_webhook unit.
//	type PaymentWebhookArgs struct {
//		Key  string  `json:"key" river:"unique"`
//		Unit Payment `json:"unit"`
//	}
//	func (PaymentWebhookArgs) Kind() string { return "billing.payment_webhook" }
//	func (PaymentWebhookArgs) InsertOpts() river.InsertOpts {
//		return river.InsertOpts{Queue: "billing", UniqueOpts: river.UniqueOpts{ByArgs: true}}
//	}
//	func (j *PaymentWebhook) InsertTx(ctx context.Context, client *idemriver.Client, tx pgx.Tx, units ...Payment) error
//	func (j *PaymentWebhook) InsertManyTx(ctx context.Context, client *idemriver.Client, tx pgx.Tx, units ...Payment) error
//
//	type InvoiceSyncRunArgs struct{}   // watermark and cursor jobs: the periodic Run
//	type InvoiceSyncDrainArgs struct{} // every River job: the periodic Drain
func riverJob(f *jen.File, j *model.Job) {
	if j.River == nil {
		return
	}
	f.ImportName(riverPkg, "river")
	f.ImportName(idemriverPkg, "idemriver")
	if j.Source == model.SourceNone {
		name := unitArgsName(j)
		f.Commentf("%s is the River job of one handed-in %s unit, kind %q.", name, j.Name, j.River.Kind)
		f.Comment("River keeps it unique by Key, the unit's idempotency key, while it is queued,")
		f.Comment("running or completed.")
		f.Type().Id(name).Struct(
			jen.Id("Key").String().Tag(map[string]string{"json": "key", "river": "unique"}),
			jen.Id("Unit").Id(j.Unit.GoName).Tag(map[string]string{"json": "unit"}),
		)
		opts := jen.Dict{
			jen.Id("Queue"):      jen.Lit(j.River.Queue),
			jen.Id("UniqueOpts"): rv("UniqueOpts").Values(jen.Dict{jen.Id("ByArgs"): jen.True()}),
		}
		maxDoc := "River's default attempts (the unit has no max_attempts)"
		if j.Unit.MaxAttempts > 0 {
			opts[jen.Id("MaxAttempts")] = jen.Lit(j.Unit.MaxAttempts)
			maxDoc = fmt.Sprintf("%d attempts, the unit's max_attempts, after which the ledger parks it", j.Unit.MaxAttempts)
		}
		kindMethod(f, name, j.River.Kind)
		f.Commentf("InsertOpts: queue %q, unique by key, %s.", j.River.Queue, maxDoc)
		f.Func().Params(jen.Id(name)).Id("InsertOpts").Params().Add(rv("InsertOpts")).Block(jen.Return(rv("InsertOpts").Values(opts)))
		f.Commentf("InsertTx enqueues one %s per unit inside tx, the caller's transaction, so the units", name)
		f.Comment("are queued exactly when the caller's own rows commit. A copy of a queued, running or")
		f.Comment("completed unit is skipped; a copy with a different payload returns idem.ErrPayloadMismatch;")
		f.Comment("a unit whose key renders empty returns idem.ErrEmptyKey. Nothing is enqueued past an error.")
		insertFunc(f, j, name, "InsertTx")
		f.Comment("InsertManyTx enqueues the units as InsertTx does, in one River InsertManyTx statement")
		f.Comment("inside tx. Every key is checked first: an empty key returns idem.ErrEmptyKey, and a key")
		f.Comment("given twice is enqueued once (a copy with another payload returns idem.ErrPayloadMismatch).")
		f.Comment("A unit River already holds is skipped, or refused with idem.ErrPayloadMismatch after the")
		f.Comment("statement: on any error, roll tx back.")
		insertFunc(f, j, name, "InsertManyTx")
	} else {
		periodicArgs(f, runArgsName(j), j.River.Kind+".run", j.River.Queue,
			fmt.Sprintf("the periodic River job that calls %s's Run every %s,", j.GoName, j.River.Every),
			"one run at a time across workers.")
	}
	periodicArgs(f, drainArgsName(j), j.River.Kind+".drain", j.River.Queue,
		fmt.Sprintf("the periodic River job that calls %s's Drain, one at a time", j.GoName),
		"across workers: the fleet performs the effects a worker that died still owed.")
}

// insertFunc emits the job's method fn, which calls idemriver's fn (InsertTx
// or InsertManyTx) with the unit's args and back.
func insertFunc(f *jen.File, j *model.Job, args, fn string) {
	f.Func().Add(recv(j)).Id(fn).Params(jen.Id("ctx").Add(Context()), jen.Id("client").Op("*").Add(irv("Client")),
		jen.Id("tx").Qual("github.com/jackc/pgx/v5", "Tx"), jen.Id("units").Op("...").Id(j.Unit.GoName)).Error().Block(
		jen.Return(irv(fn).Call(jen.Id("ctx"), jen.Id("client"), jen.Id("tx"), jen.Id("j").Dot("e"), jen.Id("units"),
			jen.Func().Params(jen.Id("u").Id(j.Unit.GoName)).Id(args).Block(
				jen.Return(jen.Id(args).Values(jen.Dict{jen.Id("Key"): jen.Id("u").Dot("Key").Call(), jen.Id("Unit"): jen.Id("u")}))),
			jen.Func().Params(jen.Id("a").Id(args)).Id(j.Unit.GoName).Block(jen.Return(jen.Id("a").Dot("Unit"))),
		)),
	)
}

// kindMethod emits func (T) Kind() string { return "kind" }.
func kindMethod(f *jen.File, typ, kind string) {
	f.Commentf("Kind is the River job kind.")
	f.Func().Params(jen.Id(typ)).Id("Kind").Params().String().Block(jen.Return(jen.Lit(kind)))
}

// periodicArgs emits an empty args type, its kind and its queue; doc is
// its comment's two lines.
func periodicArgs(f *jen.File, name, kind, queue, doc, doc2 string) {
	f.Commentf("%s is %s", name, doc)
	f.Comment(doc2)
	f.Type().Id(name).Struct()
	kindMethod(f, name, kind)
	f.Commentf("InsertOpts puts it on queue %q.", queue)
	f.Func().Params(jen.Id(name)).Id("InsertOpts").Params().Add(rv("InsertOpts")).Block(
		jen.Return(rv("InsertOpts").Values(jen.Dict{jen.Id("Queue"): jen.Lit(queue)})))
}

// RiverFile emits the package's River registration, when any job has river:,
// and each such job's River args types and insert verbs (riverJob).
//
//	type RiverJobs struct { InvoiceSync *InvoiceSync; PaymentWebhook *PaymentWebhook }
//	func AddRiverWorkers(workers *river.Workers, jobs RiverJobs, drainEvery time.Duration) ([]*river.PeriodicJob, error)
//	func RiverQueues(maxWorkers int) map[string]river.QueueConfig
func RiverFile(p *model.Package) *jen.File {
	var jobs []*model.Job
	queues := map[string]bool{}
	for _, j := range p.Jobs {
		if j.River != nil {
			jobs = append(jobs, j)
			queues[j.River.Queue] = true
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	f := newFile(p.Name)
	f.ImportName(riverPkg, "river")
	f.ImportName(idemriverPkg, "idemriver")
	f.Comment("RiverJobs are the package's jobs that run on River; AddRiverWorkers registers the ones set.")
	f.Type().Id("RiverJobs").StructFunc(func(g *jen.Group) {
		for _, j := range jobs {
			g.Id(j.GoName).Op("*").Id(j.GoName)
		}
	})
	f.Comment("AddRiverWorkers adds to workers a River worker for each job set in jobs, and returns the")
	f.Comment("periodic jobs for River's Config.PeriodicJobs: Run every `every` for watermark and cursor")
	f.Comment("jobs, and Drain every drainEvery (idemriver.DefaultDrainEvery when 0) for each job, each")
	f.Comment("one at a time across the fleet. The jobs must be on a PostgreSQL store.")
	f.Func().Id("AddRiverWorkers").Params(jen.Id("workers").Op("*").Add(rv("Workers")), jen.Id("jobs").Id("RiverJobs"), jen.Id("drainEvery").Add(Duration())).
		Params(jen.Index().Op("*").Add(rv("PeriodicJob")), jen.Error()).BlockFunc(func(g *jen.Group) {
		g.If(jen.Id("drainEvery").Op("<=").Lit(0)).Block(jen.Id("drainEvery").Op("=").Add(irv("DefaultDrainEvery")))
		g.Var().Id("periodic").Index().Op("*").Add(rv("PeriodicJob"))
		for _, j := range jobs {
			add := func(worker *jen.Statement) *jen.Statement {
				return jen.If(jen.Err().Op(":=").Add(worker), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err()))
			}
			e := jen.Id("j").Dot("e")
			g.If(jen.Id("j").Op(":=").Id("jobs").Dot(j.GoName), jen.Id("j").Op("!=").Nil()).BlockFunc(func(g *jen.Group) {
				if j.Source == model.SourceNone {
					g.Add(add(irv("AddUnitWorker").Call(jen.Id("workers"), e.Clone(),
						jen.Func().Params(jen.Id("a").Id(unitArgsName(j))).Id(j.Unit.GoName).Block(jen.Return(jen.Id("a").Dot("Unit"))))))
				} else {
					g.Add(add(irv("AddPeriodicWorker").Types(jen.Id(j.Unit.GoName), jen.Id(runArgsName(j))).Call(jen.Id("workers"), e.Clone(), jen.Id("j").Dot("Run"))))
					g.Id("periodic").Op("=").Append(jen.Id("periodic"), irv("Periodic").Call(durationLit(j.River.Every), jen.Id(runArgsName(j)).Values()))
				}
				g.Add(add(irv("AddPeriodicWorker").Types(jen.Id(j.Unit.GoName), jen.Id(drainArgsName(j))).Call(jen.Id("workers"), e.Clone(), jen.Id("j").Dot("Drain"))))
				g.Id("periodic").Op("=").Append(jen.Id("periodic"), irv("Periodic").Call(jen.Id("drainEvery"), jen.Id(drainArgsName(j)).Values()))
			})
		}
		g.Return(jen.Id("periodic"), jen.Nil())
	})
	f.Comment("RiverQueues returns River's Config.Queues for the package's River queues, each with")
	f.Comment("maxWorkers workers.")
	f.Func().Id("RiverQueues").Params(jen.Id("maxWorkers").Int()).Map(jen.String()).Add(rv("QueueConfig")).Block(
		jen.Return(jen.Map(jen.String()).Add(rv("QueueConfig")).Values(jen.DictFunc(func(d jen.Dict) {
			for q := range queues {
				d[jen.Lit(q)] = jen.Values(jen.Dict{jen.Id("MaxWorkers"): jen.Id("maxWorkers")})
			}
		}))))
	for _, j := range jobs {
		riverJob(f, j)
	}
	return f
}
