package golang

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
)

// adoptedStandIn emits, into the crash-test file of a package with adopted
// destinations (adopt: true), the tables the service's own migrations would
// create, and a wrapper that has Migrate create them first, so the crash
// tests run on a fresh database as the service runs on its own:
//
//	const adoptedSQLiteTables = "CREATE TABLE IF NOT EXISTS signups (...);\n"
//
//	func withAdoptedTables(s *Store, create func(context.Context) error) *Store {
//		migrate := s.migrate
//		s.migrate = func(ctx context.Context) error {
//			if err := create(ctx); err != nil {
//				return err
//			}
//			return migrate(ctx)
//		}
//		return s
//	}
func adoptedStandIn(f *jen.File, p *model.Package) {
	if !hasAdopted(p) {
		return
	}
	for _, d := range sqlgen.Dialects(p) {
		f.Commentf("%s stands in for the service's migrations of its adopted tables.", adoptedDDLConst(d))
		f.Const().Id(adoptedDDLConst(d)).Op("=").Add(rawLit(string(sqlgen.AdoptedTables(p, d))))
	}
	f.Comment("withAdoptedTables has Migrate create the adopted tables first, as the service's own")
	f.Comment("migrations would, before it checks them.")
	f.Func().Id("withAdoptedTables").Params(jen.Id("s").Op("*").Id("Store"), jen.Id("create").Func().Params(Context()).Error()).Op("*").Id("Store").Block(
		jen.Id("migrate").Op(":=").Id("s").Dot("migrate"),
		jen.Id("s").Dot("migrate").Op("=").Func().Params(jen.Id("ctx").Add(Context())).Error().Block(
			jen.If(jen.Err().Op(":=").Id("create").Call(jen.Id("ctx")), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
			jen.Return(jen.Id("migrate").Call(jen.Id("ctx"))),
		),
		jen.Return(jen.Id("s")),
	)
}

// adoptedMisfitsTest emits the test that creates each adopted table changed
// in one column (a nullable column made NOT NULL, another type, a column
// left out) and requires Migrate to refuse it, naming the column, with
// nothing changed (crashsim.AdoptedMisfits):
//
//	func TestAdoptedTablesRefuseMisfits(t *testing.T) {
//		t.Run("sqlite", func(t *testing.T) {
//			crashsim.SQLiteMisfits(t, adoptedSQLiteDDL, adoptedSQLiteTables, func(db *sql.DB) func(context.Context) error {
//				return NewSQLiteStore(db).Migrate
//			})
//		})
//		...
//	}
func adoptedMisfitsTest(f *jen.File, p *model.Package) {
	if !hasAdopted(p) {
		return
	}
	var runs, pgRuns []jen.Code // PostgreSQL's last: it returns when not set
	// The package's own dialects: a test-only SQLite has no schema file,
	// so its Migrate checks the adopted tables only after its migrations.
	for _, d := range p.Dialects {
		name, helper, ctor, handle := "sqlite", "SQLiteMisfits", "NewSQLiteStore", jen.Id("db").Op("*").Qual("database/sql", "DB")
		if d == model.Postgres {
			name, helper, ctor, handle = "postgres", "PostgresMisfits", "NewPostgresStore", jen.Id("pool").Op("*").Qual("github.com/jackc/pgx/v5/pgxpool", "Pool")
			pgRuns = append(pgRuns, jen.If(jen.Qual("os", "Getenv").Call(jen.Lit("IDEMGEN_TEST_POSTGRES")).Op("==").Lit("")).Block(
				jen.Id("t").Dot("Log").Call(jen.Lit("postgres: not run, IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run this variant")),
				jen.Return(),
			))
		}
		arg := "db"
		if d == model.Postgres {
			arg = "pool"
		}
		run := jen.Id("t").Dot("Run").Call(jen.Lit(name), jen.Func().Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
			jen.Qual(crashsimPkg, helper).Call(jen.Id("t"), jen.Id(adoptedDDLConst(d)), jen.Id(adoptedTablesVar(d)),
				jen.Func().Params(handle).Func().Params(Context()).Error().Block(jen.Return(jen.Id(ctor).Call(jen.Id(arg)).Dot("Migrate")))),
		))
		if d == model.Postgres {
			pgRuns = append(pgRuns, run)
		} else {
			runs = append(runs, run)
		}
	}
	runs = append(runs, pgRuns...)
	f.Comment("TestAdoptedTablesRefuseMisfits: each adopted table changed in one column (a nullable")
	f.Comment("column made NOT NULL, another type, a column left out) is refused by Migrate, which")
	f.Comment("names the column and changes nothing.")
	f.Func().Id("TestAdoptedTablesRefuseMisfits").Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(runs...)
}

func adoptedDDLConst(d model.Dialect) string {
	if d == model.Postgres {
		return "adoptedPostgresDDL"
	}
	return "adoptedSQLiteDDL"
}

// simStore is the crash test's store for one dialect: the constructor's,
// with the adopted tables created before Migrate when there are any.
//
//	withAdoptedTables(NewSQLiteStore(db), func(ctx context.Context) error {
//		_, err := db.ExecContext(ctx, adoptedSQLiteDDL)
//		return err
//	})
func simStore(p *model.Package, d model.Dialect) *jen.Statement {
	ctor, handle := "NewSQLiteStore", "db"
	exec := jen.Id("db").Dot("ExecContext")
	if d == model.Postgres {
		ctor, handle = "NewPostgresStore", "pool"
		exec = jen.Id("pool").Dot("Exec")
	}
	store := jen.Id(ctor).Call(jen.Id(handle))
	if !hasAdopted(p) {
		return store
	}
	return jen.Id("withAdoptedTables").Call(store, jen.Func().Params(jen.Id("ctx").Add(Context())).Error().Block(
		jen.List(jen.Id("_"), jen.Err()).Op(":=").Add(exec).Call(jen.Id("ctx"), jen.Id(adoptedDDLConst(d))),
		jen.Return(jen.Err()),
	))
}
