package golang

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// idemopsPkg is the runtime's operations reads (idem/idemops), which the
// operations page and `idemgen status` read with.
const idemopsPkg = "github.com/idemgen/idemgen/idem/idemops"

// OpsFile emits OpsPackage, the package as its spec describes it to the
// runtime's operations reads and page: jobs in spec order with their doc,
// source and unit max_attempts, and each effect's version, lease,
// max_attempts, rate, concurrency and redact. A service hands it to
// idemops.New; it is in a file of its own, and a service that never calls
// it links nothing of idemops.
//
//	func OpsPackage() *idemops.Package {
//		return &idemops.Package{Name: "billing", Tables: ledgerTables, Jobs: []*idemops.Job{
//			{Name: "invoice_sync", Doc: "...", Source: "watermark", UnitMaxAttempts: 3, Effects: []*idemops.EffectSpec{
//				{Name: "notify_new_invoice", Version: 2, Lease: 5 * time.Minute, MaxAttempts: 5}}},
//		}}
//	}
func OpsFile(p *model.Package) *jen.File {
	f := newFile(p.Name)
	var jobs []jen.Code
	for _, j := range p.Jobs {
		job := jen.Dict{jen.Id("Name"): jen.Lit(j.Name), jen.Id("Source"): jen.Lit(string(j.Source))}
		if j.Doc != "" {
			job[jen.Id("Doc")] = textLit(j.Doc)
		}
		if j.Unit != nil && j.Unit.MaxAttempts > 0 {
			job[jen.Id("UnitMaxAttempts")] = jen.Lit(j.Unit.MaxAttempts)
		}
		var effects []jen.Code
		for _, e := range j.Effects {
			fx := jen.Dict{jen.Id("Name"): jen.Lit(e.Name), jen.Id("Version"): jen.Lit(e.Version),
				jen.Id("Lease"): durationLit(e.Lease), jen.Id("MaxAttempts"): jen.Lit(e.MaxAttempts)}
			if e.Rate.N > 0 {
				fx[jen.Id("RateN")], fx[jen.Id("RatePer")] = jen.Lit(int(e.Rate.N)), durationLit(e.Rate.Per)
			}
			if e.Concurrency > 0 {
				fx[jen.Id("Concurrency")] = jen.Lit(e.Concurrency)
			}
			if e.RedactPayload {
				fx[jen.Id("RedactPayload")] = jen.True()
			}
			if e.RedactResult {
				fx[jen.Id("RedactResult")] = jen.True()
			}
			effects = append(effects, jen.Values(fx))
		}
		if len(effects) > 0 {
			job[jen.Id("Effects")] = jen.Index().Op("*").Qual(idemopsPkg, "EffectSpec").Values(effects...)
		}
		jobs = append(jobs, jen.Values(job))
	}
	f.Comment("OpsPackage describes the package as its spec does to the runtime's operations")
	f.Comment("reads and page (idemops.New, idemui.New): each job's doc, source and unit")
	f.Comment("max_attempts; each effect's version, lease, max_attempts, rate, concurrency and")
	f.Comment("redact, which the page, `idemgen ledger` and their JSON honour.")
	f.Func().Id("OpsPackage").Params().Op("*").Qual(idemopsPkg, "Package").Block(
		jen.Return(jen.Op("&").Qual(idemopsPkg, "Package").Values(jen.Dict{
			jen.Id("Name"):   jen.Lit(p.Name),
			jen.Id("Tables"): jen.Id("ledgerTables"),
			jen.Id("Jobs"):   jen.Index().Op("*").Qual(idemopsPkg, "Job").Values(jobs...),
		})),
	)
	return f
}
