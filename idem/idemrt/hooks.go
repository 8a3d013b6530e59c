package idemrt

import (
	"context"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// The tests' hooks (a crash hook, a definition edit, a simulated lease
// clock and waits) are options.hooks, set only through the test package
// idem/idemtest: production code has no way to them in this package's API.
func init() {
	hooks.Option = func(set func(*hooks.State)) any { return Option(func(o *options) { set(&o.hooks) }) }
	hooks.Of = func(engine any) *hooks.State {
		if e, ok := engine.(interface{ testHooks() *hooks.State }); ok {
			return e.testHooks()
		}
		return nil
	}
}

// testHooks is hooks.Of's way to an engine of any unit type.
func (e *Engine[U]) testHooks() *hooks.State { return &e.opt.hooks }

// hit calls the crash hook at p; nil without one (production: one nil check).
func (e *Engine[U]) hit(ctx context.Context, p hooks.Point, detail string) error {
	if e.opt.hooks.Crash == nil {
		return nil
	}
	return e.opt.hooks.Crash(ctx, p, detail)
}
