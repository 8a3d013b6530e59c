package golang

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// processTxVerbs emits, for a job of handed-in units, the outbox entry
// points: one per dialect, over a transaction the caller owns.
//
//	func (j *PaymentWebhook) ProcessTx(ctx context.Context, tx pgx.Tx, units ...Payment) (idem.Report, error) {
//		return j.e.ProcessPgTx(ctx, tx, units)
//	}
//	func (j *PaymentWebhook) ProcessSQLTx(ctx context.Context, tx *sql.Tx, units ...Payment) (idem.Report, error) {
//		return j.e.ProcessSQLTx(ctx, tx, units)
//	}
func processTxVerbs(f *jen.File, p *model.Package, j *model.Job) {
	if j.Source != model.SourceNone {
		return
	}
	verb := func(name, engine string, tx *jen.Statement, db string) {
		f.Commentf("%s writes handed-in units and reserves the effects their writes decide inside tx,", name)
		f.Commentf("a %s transaction the caller owns, next to the caller's own rows: they commit or roll", db)
		f.Comment("back together (the outbox pattern). Nothing is performed here: after the commit, Drain")
		f.Comment("(or a River worker's periodic drain) performs the owed effects with their keys; after a")
		f.Comment("rollback nothing is owed. It stops at the first unit that does not end written or")
		f.Comment("deduped and returns a *idem.FailuresError: roll tx back then.")
		f.Func().Add(recv(j)).Id(name).Params(jen.Id("ctx").Add(Context()), jen.Id("tx").Add(tx), jen.Id("units").Op("...").Id(j.Unit.GoName)).
			Params(rt("Report"), jen.Error()).Block(
			jen.Return(jen.Id("j").Dot("e").Dot(engine).Call(jen.Id("ctx"), jen.Id("tx"), jen.Id("units"))),
		)
	}
	if p.Has(model.Postgres) {
		verb("ProcessTx", "ProcessPgTx", jen.Qual("github.com/jackc/pgx/v5", "Tx"), "PostgreSQL (pgx)")
	}
	if p.Has(model.SQLite) {
		verb("ProcessSQLTx", "ProcessSQLTx", jen.Op("*").Qual("database/sql", "Tx"), "SQLite (database/sql)")
	}
}
