package golang

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
	"github.com/idemgen/idemgen/idem/names"
)

// StoreFile emits the Store type, its constructors per dialect, Migrate and
// the destQuerier interface the dialect adapters implement.
func StoreFile(p *model.Package) *jen.File {
	f := newFile(p.Name)
	f.Anon("embed")
	runtimeHandshake(f)
	storeType(f, p)
	if sqlgen.HasQueries(p) {
		destQuerier(f, p)
	}
	f.Comment("//go:embed migrations")
	f.Var().Id("migrationsFS").Qual("embed", "FS")
	migrationsFunc(f, p)
	nonNullHelpers(f, p)
	if p.Has(model.Postgres) {
		storeConstructor(f, p, model.Postgres)
	}
	if p.Has(model.SQLite) {
		storeConstructor(f, p, model.SQLite)
	}
	f.Comment("Migrate applies the package's migrations (goose, append-only) to the store's database.")
	f.Func().Params(jen.Id("s").Op("*").Id("Store")).Id("Migrate").Params(jen.Id("ctx").Add(Context())).Error().Block(
		jen.Return(jen.Id("s").Dot("migrate").Call(jen.Id("ctx"))),
	)
	f.Comment("Runtime returns the runtime's view of the store, for integrations written once for")
	f.Comment("every generated package (the crash tests, a queue worker).")
	f.Func().Params(jen.Id("s").Op("*").Id("Store")).Id("Runtime").Params().Add(rt("Store")).Block(jen.Return(jen.Id("s").Dot("st")))
	return f
}

// runtimeHandshake emits a compile-time check that the runtime is at least
// as new as this generator (an undefined name otherwise):
//
//	const _ = idemrt.IsAtLeastVersion0_2_0
func runtimeHandshake(f *jen.File) {
	f.Commentf("This package needs the idem runtime %s or newer; if the next line does not", names.Version)
	f.Commentf("compile, upgrade it: go get github.com/idemgen/idemgen@latest")
	f.Const().Id("_").Op("=").Add(rt(RuntimeHandshake))
}

// RuntimeHandshake is the runtime constant generated code refers to, named
// after the runtime version this generator emits code for.
var RuntimeHandshake = "IsAtLeastVersion" + strings.ReplaceAll(names.Version, ".", "_")

// storeType emits the Store, which embeds the runtime's recovery (the
// ledger and parked listings, Retry, RetryParked, Forget: one
// implementation for every package), and its tables:
//
//	type Store struct {
//		idem.Recovery
//		st      idem.Store
//		migrate func(context.Context) error
//	}
//
//	func newStore(st idem.Store, migrate func(context.Context) error) *Store {
//		return &Store{Recovery: idemrt.NewRecovery(st), st: st, migrate: migrate}
//	}
//
//	var ledgerTables = idemrt.Tables{Ledger: "billing_idem_ledger", ...}
func storeType(f *jen.File, p *model.Package) {
	f.Commentf("Store is the database the %s jobs run against, PostgreSQL or SQLite. Its", p.Name)
	f.Comment("Recovery lists the ledger and the parked units and puts back or forgets what is")
	f.Comment("under a key (Retry, RetryParked, Forget), as `idemgen ledger` does.")
	migrateFunc := jen.Func().Params(Context()).Error()
	f.Type().Id("Store").Struct(
		rt("Recovery"),
		jen.Id("st").Add(rt("Store")),
		jen.Id("migrate").Add(migrateFunc.Clone()),
	)
	f.Comment("newStore returns a Store over st, with its recovery.")
	f.Func().Id("newStore").Params(jen.Id("st").Add(rt("Store")), jen.Id("migrate").Add(migrateFunc.Clone())).Op("*").Id("Store").Block(
		jen.Return(jen.Op("&").Id("Store").Values(jen.Dict{
			jen.Id("Recovery"): rt("NewRecovery").Call(jen.Id("st")),
			jen.Id("st"):       jen.Id("st"),
			jen.Id("migrate"):  jen.Id("migrate"),
		})),
	)
	f.Comment("ledgerTables are the package's bookkeeping tables, which the runtime's ledger")
	f.Comment("queries run on.")
	f.Var().Id("ledgerTables").Op("=").Add(rt("Tables")).Values(jen.Dict{
		jen.Id("Ledger"): jen.Lit(p.Tables.Ledger), jen.Id("Progress"): jen.Lit(p.Tables.Progress),
		jen.Id("Seen"): jen.Lit(p.Tables.Seen), jen.Id("Parked"): jen.Lit(p.Tables.Parked),
		jen.Id("Limits"): jen.Lit(p.Tables.Limits),
	})
}

// destQuerier emits the interface of per-job destination queries:
//
//	type destQuerier interface { querier; writeInvoiceSync(...) (Outcome, error); ... }
func destQuerier(f *jen.File, p *model.Package) {
	f.Comment("destQuerier is implemented by each dialect's querier for every destination table.")
	f.Type().Id("destQuerier").InterfaceFunc(func(g *jen.Group) {
		g.Add(rt("Querier"))
		for _, j := range p.Jobs {
			if j.Dest == nil {
				continue
			}
			g.Id("write"+j.GoName).Params(Context(), jen.Id(j.Unit.GoName), jen.String(), jen.Int32()).Params(rt("Outcome"), jen.Error())
			g.Id("write"+j.GoName+"Batch").Params(Context(), jen.Index().Id(j.Unit.GoName), jen.Index().String(), jen.Int32()).Params(jen.Index().Add(rt("Outcome")), jen.Error())
			if j.ComparesReplays() {
				g.Id("holds"+j.GoName).Params(Context(), jen.Id(j.Unit.GoName)).Params(jen.Bool(), jen.Error())
			}
			g.Id("list"+j.GoName).Params(Context()).Params(jen.Index().Id(j.Unit.GoName), jen.Error())
			g.Id("stale"+j.GoName).Params(Context(), jen.Int32(), jen.Int32()).Params(jen.Index().String(), jen.Error())
		}
	})
}

func migrationsFunc(f *jen.File, p *model.Package) {
	f.Comment("Migrations returns the goose migrations for dialect (\"postgres\" or \"sqlite\"),")
	f.Comment("for teams that apply migrations with their own tooling.")
	f.Func().Id("Migrations").Params(jen.Id("dialect").String()).Params(jen.Qual("io/fs", "FS"), jen.Error()).Block(
		jen.Switch(jen.Id("dialect")).BlockFunc(func(g *jen.Group) {
			for _, d := range p.Dialects {
				g.Case(jen.Lit(string(d))).Block(jen.Return(jen.Qual("io/fs", "Sub").Call(jen.Id("migrationsFS"), jen.Lit(sqlgen.LayoutOf(d).Migrations))))
			}
		}),
		jen.Return(jen.Nil(), Errorf().Call(jen.Lit(fmt.Sprintf("package %s has no migrations for dialect %%q", p.Name)), jen.Id("dialect"))),
	)
}

// storeConstructor emits NewPostgresStore or NewSQLiteStore: the runtime's
// store for the dialect, over the package's tables and with its querier.
func storeConstructor(f *jen.File, p *model.Package, d model.Dialect) {
	querier := jen.Nil()
	if sqlgen.HasQueries(p) {
		querier = jen.Id(querierOf(d).constructor)
	}
	sub := jen.List(jen.Id("sub"), jen.Id("err")).Op(":=").Qual("io/fs", "Sub").Call(jen.Id(migrationsVar(p, d)), jen.Lit(sqlgen.MigrationsOf(p, d)))
	check := jen.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Id("err")))
	table := jen.Lit(p.Tables.Migrations)
	migrate := func(db *jen.Statement, dialect string) []jen.Code {
		up := rt("Migrate").Call(jen.Id("ctx"), db, jen.Qual("github.com/pressly/goose/v3", dialect), jen.Id("sub"), table)
		if !hasAdopted(p) {
			return []jen.Code{jen.Return(up)}
		}
		return []jen.Code{
			jen.If(jen.Err().Op(":=").Add(up), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
			jen.Return(rt("CheckTables").Call(jen.Id("ctx"), db.Clone(), jen.Qual("github.com/pressly/goose/v3", dialect), jen.Id(adoptedTablesVar(d)))),
		}
	}
	if hasAdopted(p) {
		adoptedTables(f, p, d)
	}
	if d == model.Postgres {
		f.Comment("NewPostgresStore returns a Store over a pgx pool.")
		f.Func().Id("NewPostgresStore").Params(jen.Id("pool").Op("*").Add(PgxPool())).Op("*").Id("Store").Block(
			jen.Return(jen.Id("newStore").Call(
				jen.Qual(idemPG, "NewStore").Call(jen.Id("pool"), jen.Id("ledgerTables"), querier),
				jen.Func().Params(jen.Id("ctx").Add(Context())).Error().Block(
					append([]jen.Code{
						jen.Id("db").Op(":=").Qual("github.com/jackc/pgx/v5/stdlib", "OpenDBFromPool").Call(jen.Id("pool")),
						jen.Defer().Id("db").Dot("Close").Call(),
						sub, check,
					}, migrate(jen.Id("db"), "DialectPostgres")...)...,
				),
			)),
		)
		return
	}
	if sqlgen.TestOnly(p, d) {
		f.Comment("NewSQLiteStore returns a Store over a database/sql SQLite handle, for this package's")
		f.Commentf("tests only: its dialects are %s, but the generated tests run on an embedded SQLite", dialectList(p))
		f.Comment("whatever they are. Its file's _test.go name keeps it, and the SQLite runtime, out of")
		f.Comment("every build but go test's.")
	} else {
		f.Comment("NewSQLiteStore returns a Store over a database/sql SQLite handle (any driver;")
		f.Comment("the example and tests use github.com/ncruces/go-sqlite3, which is pure Go).")
	}
	f.Func().Id("NewSQLiteStore").Params(jen.Id("db").Op("*").Add(SQLDB())).Op("*").Id("Store").Block(
		jen.Return(jen.Id("newStore").Call(
			jen.Qual(idemSQLite, "NewStore").Call(jen.Id("db"), jen.Id("ledgerTables"), querier),
			jen.Func().Params(jen.Id("ctx").Add(Context())).Error().Block(
				append([]jen.Code{sub, check}, migrate(jen.Id("db"), "DialectSQLite3")...)...,
			),
		)),
	)
}

// migrationsVar is the embedded file system that holds the migrations of
// the package's store for d: migrationsFS, or, for a test-only dialect,
// the test schema that TestStoreFile embeds.
func migrationsVar(p *model.Package, d model.Dialect) string {
	if sqlgen.TestOnly(p, d) {
		return "testSchemaFS"
	}
	return "migrationsFS"
}

// dialectList is the spec's dialects as it writes them: [postgres].
func dialectList(p *model.Package) string {
	var ds []string
	for _, d := range p.Dialects {
		ds = append(ds, string(d))
	}
	return "[" + strings.Join(ds, ", ") + "]"
}

// TestStoreFile emits the store of a test-only dialect (sqlgen.TestOnly),
// for the package's _test.go files only: the querier DialectFile emits,
// the test schema, embedded, and the store's constructor.
//
//	//go:embed internal/sqlitedb/schema
//	var testSchemaFS embed.FS
//
//	func NewSQLiteStore(db *sql.DB) *Store { ... }
func TestStoreFile(p *model.Package, d model.Dialect, importPath string) *jen.File {
	f := DialectFile(p, d, importPath)
	if f == nil {
		f = newFile(p.Name)
	}
	f.Anon("embed")
	f.Commentf("%s holds the schema the package's tests run on %s (%s).", migrationsVar(p, d), dialectName(d), sqlgen.MigrationsOf(p, d))
	f.Comment("//go:embed " + sqlgen.MigrationsOf(p, d))
	f.Var().Id(migrationsVar(p, d)).Qual("embed", "FS")
	storeConstructor(f, p, d)
	return f
}

// dialectName is how the docs name d.
func dialectName(d model.Dialect) string {
	return map[model.Dialect]string{model.Postgres: "PostgreSQL", model.SQLite: "SQLite"}[d]
}

func hasAdopted(p *model.Package) bool {
	return slices.ContainsFunc(p.Jobs, func(j *model.Job) bool { return j.Dest != nil && j.Dest.Adopted })
}

func adoptedTablesVar(d model.Dialect) string {
	if d == model.Postgres {
		return "adoptedPostgresTables"
	}
	return "adoptedSQLiteTables"
}

// adoptedTables emits the shape of each destination the service's own
// migrations own (adopt: true): the columns idemgen would have created,
// its bookkeeping columns included, and the unique constraint. Migrate
// checks it after the migrations:
//
//	var adoptedPostgresTables = []idemrt.TableShape{{Job: "signup_sync", Name: "signups",
//		Columns: []idemrt.ColumnShape{{Name: "email", Type: "text"}, {Name: "locale", Type: "text", Nullable: true},
//			{Name: "idemgen_rev", Type: "bigint", Default: "1"}, ...},
//		Unique: []string{"email"}}}
func adoptedTables(f *jen.File, p *model.Package, d model.Dialect) {
	var tables []jen.Code
	for _, t := range sqlgen.SchemaOf(p, d).Tables {
		if !t.Adopted {
			continue
		}
		var cols []jen.Code
		for _, col := range t.Columns {
			c := jen.Dict{jen.Id("Name"): jen.Lit(col.Name), jen.Id("Type"): jen.Lit(col.Type)}
			if !col.NotNull {
				c[jen.Id("Nullable")] = jen.True()
			}
			if col.Default != "" {
				c[jen.Id("Default")] = jen.Lit(col.Default)
			}
			cols = append(cols, jen.Values(c))
		}
		var unique []jen.Code
		for _, u := range t.Unique.Columns {
			unique = append(unique, jen.Lit(u))
		}
		tables = append(tables, jen.Values(jen.Dict{
			jen.Id("Job"):     jen.Lit(t.Job),
			jen.Id("Name"):    jen.Lit(t.Name),
			jen.Id("Columns"): jen.Index().Add(rt("ColumnShape")).Values(cols...),
			jen.Id("Unique"):  jen.Index().String().Values(unique...),
		}))
	}
	f.Commentf("%s are the destinations the service's own migrations create and change", adoptedTablesVar(d))
	f.Comment("(adopt: true): Migrate checks that they fit their jobs.")
	f.Var().Id(adoptedTablesVar(d)).Op("=").Index().Add(rt("TableShape")).Values(tables...)
}

// The runtime's store packages, one per dialect.
const (
	idemPG     = "github.com/idemgen/idemgen/idem/idempg"
	idemSQLite = "github.com/idemgen/idemgen/idem/idemsqlite"
)

// dialectQuerier names a dialect's querier type, its constructor and the
// runtime package whose Querier (the ledger's queries) it embeds.
type dialectQuerier struct{ typ, constructor, runtime string }

func querierOf(d model.Dialect) dialectQuerier {
	if d == model.Postgres {
		return dialectQuerier{"pgQuerier", "newPgQuerier", idemPG}
	}
	return dialectQuerier{"sqliteQuerier", "newSQLiteQuerier", idemSQLite}
}

// DialectFile emits one dialect's querier, which adds the destination
// queries of every job to the runtime's ledger queries, or nil for a
// package without destinations (the runtime's ledger is its querier):
//
//	type pgQuerier struct {
//		idempg.Querier
//		q *pgdb.Queries
//	}
//
//	func newPgQuerier(l idempg.Querier) idemrt.Querier { return pgQuerier{l, pgdb.New(l.DB())} }
//
//	func (q pgQuerier) writeInvoiceSync(ctx context.Context, u Invoice, key string, v int32) (idem.Outcome, error)
//	func (q pgQuerier) writeInvoiceSyncBatch(ctx context.Context, us []Invoice, keys []string, v int32) ([]idem.Outcome, error)
//	func (q pgQuerier) listInvoiceSync(ctx context.Context) ([]Invoice, error)
//	func (q pgQuerier) staleInvoiceSync(ctx context.Context, v, limit int32) ([]string, error)
func DialectFile(p *model.Package, d model.Dialect, importPath string) *jen.File {
	if !sqlgen.HasQueries(p) {
		return nil
	}
	f := newFile(p.Name)
	db := importPath + "/" + sqlgen.LayoutOf(d).Out
	f.ImportName(db, path.Base(db))
	dq := querierOf(d)
	noRows := "SQLiteNoRows"
	if d == model.Postgres {
		noRows = "PgNoRows"
	}
	f.Commentf("%s runs the package's queries on %s: the ledger's, which the runtime", dq.typ, dialectName(d))
	f.Commentf("owns, and the destinations', which sqlc compiled into %s.", sqlgen.LayoutOf(d).Out)
	f.Type().Id(dq.typ).Struct(
		jen.Qual(dq.runtime, "Querier"),
		jen.Id("q").Op("*").Qual(db, "Queries"),
	)
	f.Func().Id(dq.constructor).Params(jen.Id("l").Qual(dq.runtime, "Querier")).Add(rt("Querier")).Block(
		jen.Return(jen.Id(dq.typ).Values(jen.Id("l"), jen.Qual(db, "New").Call(jen.Id("l").Dot("DB").Call()))),
	)
	r := jen.Params(jen.Id("q").Id(dq.typ))
	for _, j := range p.Jobs {
		if j.Dest == nil {
			continue
		}
		nothing := "OutcomeUnchanged"
		if j.Dest.Write == model.InsertOnce {
			nothing = "OutcomeDeduped"
		}
		version := jen.Id("v")
		if d == model.SQLite {
			version = jen.Int64().Call(jen.Id("v"))
		}
		params := jen.Dict{jen.Id("IdemgenKey"): jen.Id("key"), jen.Id("IdemgenJobVersion"): version}
		for _, fld := range j.Unit.Fields {
			params[jen.Id(fld.GoName)] = toDB(d, fld, jen.Id("u").Dot(fld.GoName))
		}
		singleWrite(f, j, d, db, r.Clone(), params, noRows, nothing)
		batchWrite(f, j, d, db, r.Clone(), nothing)
		if j.ComparesReplays() {
			holdsMethod(f, j, d, db, r.Clone())
		}

		f.Commentf("list%s reads every %s row back as units.", j.GoName, j.Dest.Table)
		f.Func().Add(r.Clone()).Id("list"+j.GoName).Params(jen.Id("ctx").Add(Context())).Params(jen.Index().Id(j.Unit.GoName), jen.Error()).BlockFunc(func(g *jen.Group) {
			g.List(jen.Id("rs"), jen.Id("err")).Op(":=").Id("q").Dot("q").Dot("List" + j.GoName).Call(jen.Id("ctx"))
			g.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id("err")))
			g.Id("out").Op(":=").Make(jen.Index().Id(j.Unit.GoName), jen.Lit(0), jen.Len(jen.Id("rs")))
			g.For(jen.List(jen.Id("_"), jen.Id("r")).Op(":=").Range().Id("rs")).Block(
				jen.Id("out").Op("=").Append(jen.Id("out"), jen.Id(j.Unit.GoName).Values(jen.DictFunc(func(dd jen.Dict) {
					for _, fld := range j.Unit.Fields {
						col := jen.Id("r").Dot(fld.GoName)
						if len(j.Unit.Fields) == 1 {
							col = jen.Id("r")
						}
						dd[jen.Id(fld.GoName)] = fromDB(d, fld, col)
					}
				}))),
			)
			g.Return(jen.Id("out"), jen.Id("err"))
		})

		limitParams := jen.Dict{jen.Id("IdemgenJobVersion"): jen.Id("v"), jen.Id("RowLimit"): jen.Id("limit")}
		if d == model.SQLite {
			limitParams = jen.Dict{jen.Id("IdemgenJobVersion"): jen.Int64().Call(jen.Id("v")), jen.Id("RowLimit"): jen.Int64().Call(jen.Id("limit"))}
		}
		f.Commentf("stale%s lists keys of rows written by a job version older than v.", j.GoName)
		f.Func().Add(r.Clone()).Id("stale"+j.GoName).Params(jen.Id("ctx").Add(Context()), jen.List(jen.Id("v"), jen.Id("limit")).Int32()).Params(jen.Index().String(), jen.Error()).Block(
			jen.Return(jen.Id("q").Dot("q").Dot("Stale"+j.GoName).Call(jen.Id("ctx"), jen.Qual(db, "Stale"+j.GoName+"Params").Values(limitParams))),
		)
	}
	return f
}

// singleWrite emits a job's write of one unit: the guarded upsert, which
// returns what it did. On SQLite, whose RETURNING costs a new row about as
// much as the insert itself, a plain insert that does nothing on conflict
// goes first, and only a key already written takes the upsert:
//
//	func (q sqliteQuerier) writeInvoiceSync(ctx context.Context, u Invoice, key string, v int32) (idem.Outcome, error) {
//		p := sqlitedb.WriteInvoiceSyncParams{...}
//		n, err := q.q.InsertInvoiceSync(ctx, sqlitedb.InsertInvoiceSyncParams(p))
//		if err != nil {
//			return "", err
//		}
//		if n == 1 {
//			return idem.OutcomeInserted, nil
//		}
//		w, err := q.q.WriteInvoiceSync(ctx, p)
//		// No row back means the conflict clause wrote nothing.
//		if idemrt.SQLiteNoRows(err) {
//			return idem.OutcomeUnchanged, nil
//		}
//		...
//		return idem.Outcome(w), nil
//	}
func singleWrite(f *jen.File, j *model.Job, d model.Dialect, db string, recv *jen.Statement, params jen.Dict, noRows, nothing string) {
	f.Commentf("write%s upserts u into %s (%s).", j.GoName, j.Dest.Table, j.Dest.Write)
	f.Func().Add(recv).Id("write"+j.GoName).Params(jen.Id("ctx").Add(Context()), jen.Id("u").Id(j.Unit.GoName), jen.Id("key").String(), jen.Id("v").Int32()).
		Params(rt("Outcome"), jen.Error()).BlockFunc(func(g *jen.Group) {
		g.Id("p").Op(":=").Qual(db, "Write"+j.GoName+"Params").Values(params)
		if d == model.SQLite {
			g.List(jen.Id("n"), jen.Id("err")).Op(":=").Id("q").Dot("q").Dot("Insert"+j.GoName).Call(jen.Id("ctx"), jen.Qual(db, "Insert"+j.GoName+"Params").Call(jen.Id("p")))
			g.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Lit(""), jen.Id("err")))
			g.If(jen.Id("n").Op("==").Lit(1)).Block(jen.Return(rt("OutcomeInserted"), jen.Nil()))
			if j.Dest.Write == model.InsertOnce {
				g.Comment("The row was there: insert_once leaves it.")
				g.Return(rt(nothing), jen.Nil())
				return
			}
		}
		g.List(jen.Id("w"), jen.Id("err")).Op(":=").Id("q").Dot("q").Dot("Write"+j.GoName).Call(jen.Id("ctx"), jen.Id("p"))
		g.Comment("No row back means the conflict clause wrote nothing.")
		g.If(rt(noRows).Call(jen.Id("err"))).Block(jen.Return(rt(nothing), jen.Nil()))
		g.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Lit(""), jen.Id("err")))
		g.Return(rt("Outcome").Call(jen.Id("w")), jen.Nil())
	})
}

// batchWrite emits a job's batch write. On PostgreSQL it fills one array
// per column (and one marking the NULLs of each nullable column) and runs
// a plain insert of them, or, when a key was there already, the guarded
// upsert; SQLite has none, and the engine writes unit by unit:
//
//	func (q pgQuerier) writeInvoiceSyncBatch(ctx context.Context, us []Invoice, keys []string, v int32) ([]idem.Outcome, error) {
//		p := pgdb.WriteInvoiceSyncBatchParams{IdemgenKey: keys, IdemgenJobVersion: v}
//		for _, u := range us {
//			p.InvoiceID = append(p.InvoiceID, u.InvoiceID)
//			...
//		}
//		// Keys all new, as on a first run: one plain insert.
//		if out, err := idemrt.PgInsertNew(ctx, q.DB(), len(keys), func(ctx context.Context) error {
//			return q.q.InsertInvoiceSyncBatch(ctx, pgdb.InsertInvoiceSyncBatchParams(p))
//		}); err != nil || out != nil {
//			return out, err
//		}
//		rs, err := q.q.WriteInvoiceSyncBatch(ctx, p)
//		...
//		return idemrt.BatchOutcomes(keys, written, idem.OutcomeUnchanged), nil
//	}
func batchWrite(f *jen.File, j *model.Job, d model.Dialect, db string, recv *jen.Statement, nothing string) {
	sig := jen.Id("write"+j.GoName+"Batch").Params(jen.Id("ctx").Add(Context()), jen.Id("us").Index().Id(j.Unit.GoName), jen.Id("keys").Index().String(), jen.Id("v").Int32()).
		Params(jen.Index().Add(rt("Outcome")), jen.Error())
	if d != model.Postgres {
		f.Commentf("write%sBatch has no single statement on SQLite: the engine calls write%s per unit.", j.GoName, j.GoName)
		f.Func().Add(recv).Add(sig).Block(jen.Return(jen.Nil(), jen.Nil()))
		return
	}
	p := jen.Id("p")
	f.Commentf("write%sBatch upserts units with distinct keys into %s in one statement.", j.GoName, j.Dest.Table)
	f.Func().Add(recv).Add(sig).BlockFunc(func(g *jen.Group) {
		g.Id("p").Op(":=").Qual(db, "Write"+j.GoName+"BatchParams").Values(jen.Dict{
			jen.Id("IdemgenKey"): jen.Id("keys"), jen.Id("IdemgenJobVersion"): jen.Id("v"),
		})
		g.For(jen.List(jen.Id("_"), jen.Id("u")).Op(":=").Range().Id("us")).BlockFunc(func(g *jen.Group) {
			for _, fld := range j.Unit.Fields {
				col := p.Clone().Dot(fld.GoName)
				val := toDB(d, fld, jen.Id("u").Dot(fld.GoName))
				if fld.Nullable {
					isNull := p.Clone().Dot(model.GoName(sqlgen.BatchNullColumn(fld.Name)))
					g.Add(isNull).Op("=").Append(isNull.Clone(), jen.Id("u").Dot(fld.GoName).Op("==").Nil())
					if fld.Pointer() {
						val = rt("ValueOr").Call(val)
					}
				}
				g.Add(col).Op("=").Append(col.Clone(), val)
			}
		})
		g.Comment("Keys all new, as on a first run: one plain insert.")
		g.If(jen.List(jen.Id("out"), jen.Id("err")).Op(":=").Add(rt("PgInsertNew")).Call(jen.Id("ctx"), jen.Id("q").Dot("DB").Call(), jen.Len(jen.Id("keys")),
			jen.Func().Params(jen.Id("ctx").Add(Context())).Error().Block(
				jen.Return(jen.Id("q").Dot("q").Dot("Insert"+j.GoName+"Batch").Call(jen.Id("ctx"), jen.Qual(db, "Insert"+j.GoName+"BatchParams").Call(p))),
			)), jen.Id("err").Op("!=").Nil().Op("||").Id("out").Op("!=").Nil()).Block(jen.Return(jen.Id("out"), jen.Id("err")))
		g.List(jen.Id("rs"), jen.Id("err")).Op(":=").Id("q").Dot("q").Dot("Write"+j.GoName+"Batch").Call(jen.Id("ctx"), p)
		g.If(jen.Id("err").Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id("err")))
		g.Id("written").Op(":=").Make(jen.Map(jen.String()).String(), jen.Len(jen.Id("rs")))
		g.For(jen.List(jen.Id("_"), jen.Id("r")).Op(":=").Range().Id("rs")).Block(
			jen.Id("written").Index(jen.Id("r").Dot("IdemgenKey")).Op("=").Id("r").Dot("IdemgenWrite"),
		)
		g.Comment("A key with no row back: the conflict clause wrote nothing.")
		g.Return(rt("BatchOutcomes").Call(jen.Id("keys"), jen.Id("written"), rt(nothing)), jen.Nil())
	})
}

// holdsMethod emits the comparison of a unit with its destination row
// (model.Job.ComparesReplays), on the fields' values as the write stores them:
//
//	func (q pgQuerier) holdsPaymentWebhook(ctx context.Context, u Payment) (bool, error) {
//		n, err := q.q.HoldsPaymentWebhook(ctx, pgdb.HoldsPaymentWebhookParams{...})
//		return n == 1, err
//	}
func holdsMethod(f *jen.File, j *model.Job, d model.Dialect, db string, recv *jen.Statement) {
	var arg jen.Code
	if len(j.Unit.Fields) == 1 {
		arg = toDB(d, j.Unit.Fields[0], jen.Id("u").Dot(j.Unit.Fields[0].GoName)) // sqlc passes a lone parameter as is
	} else {
		arg = jen.Qual(db, "Holds"+j.GoName+"Params").Values(jen.DictFunc(func(dd jen.Dict) {
			for _, fld := range j.Unit.Fields {
				dd[jen.Id(fld.GoName)] = toDB(d, fld, jen.Id("u").Dot(fld.GoName))
			}
		}))
	}
	f.Commentf("holds%s reports whether the %s row under u's key holds exactly u's data.", j.GoName, j.Dest.Table)
	f.Func().Add(recv).Id("holds"+j.GoName).Params(jen.Id("ctx").Add(Context()), jen.Id("u").Id(j.Unit.GoName)).Params(jen.Bool(), jen.Error()).Block(
		jen.List(jen.Id("n"), jen.Id("err")).Op(":=").Id("q").Dot("q").Dot("Holds"+j.GoName).Call(jen.Id("ctx"), arg),
		jen.Return(jen.Id("n").Op("==").Lit(1), jen.Id("err")),
	)
}

// toDB converts a unit field to the sqlc parameter type of the dialect.
func toDB(d model.Dialect, f *model.Field, v *jen.Statement) *jen.Statement {
	v = nonNullValue(f, v)
	if d == model.Postgres {
		return v // sqlc overrides map every PostgreSQL column to the unit's own Go type
	}
	if f.Nullable {
		switch f.Type {
		case model.String:
			return rt("SQLNullString").Call(v)
		case model.Int32, model.Int64:
			return rt("SQLNullInt").Call(v)
		case model.Float64:
			return rt("SQLNullFloat").Call(v)
		case model.Bool:
			return rt("SQLNullBool").Call(v)
		case model.Time:
			return rt("SQLNullTime").Call(v)
		case model.JSON:
			return rt("SQLNullBytes").Call(v)
		case model.UUID:
			return rt("SQLNullStringer").Call(v)
		case model.Bytes:
			return rt("SQLNullBlob").Call(v)
		}
		return v
	}
	switch f.Type {
	case model.Int32:
		return jen.Int64().Call(v)
	case model.Time:
		return rt("SQLiteTime").Call(v)
	case model.JSON:
		return jen.String().Call(v)
	case model.UUID:
		return v.Dot("String").Call()
	}
	return v
}

// fromDB converts a sqlc column value back to the unit field type.
func fromDB(d model.Dialect, f *model.Field, v *jen.Statement) *jen.Statement {
	if d == model.Postgres {
		return v
	}
	errp := jen.Op("&").Id("err")
	if f.Nullable {
		switch f.Type {
		case model.String:
			return rt("ReadNullString").Call(v)
		case model.Int32:
			return rt("ReadNullInt").Types(jen.Int32()).Call(v)
		case model.Int64:
			return rt("ReadNullInt").Types(jen.Int64()).Call(v)
		case model.Float64:
			return rt("ReadNullFloat").Call(v)
		case model.Bool:
			return rt("ReadNullBool").Call(v)
		case model.Time:
			return rt("ReadNullTime").Call(v, errp)
		case model.JSON:
			return rt("ReadNullBytes").Types(jen.Qual(jsonPkg, "RawMessage")).Call(v)
		case model.UUID:
			return rt("ReadNullParsed").Call(v, jen.Qual(uuidPkg, "Parse"), errp)
		case model.Bytes:
			return rt("ReadNullBlob").Call(v)
		}
		return v
	}
	switch f.Type {
	case model.Int32:
		return jen.Int32().Call(v)
	case model.Time:
		return rt("ReadTime").Call(v, errp)
	case model.JSON:
		return jen.Qual(jsonPkg, "RawMessage").Call(v)
	case model.UUID:
		return rt("ReadParsed").Call(v, jen.Qual(uuidPkg, "Parse"), errp)
	}
	return v
}
