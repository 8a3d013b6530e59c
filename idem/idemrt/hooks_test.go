package idemrt

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// BenchmarkCrashPoint prints the cost of a crash point beside a baseline in
// one run: production jobs have no hook, so a point is one nil check.
//
//	go test ./idem/idemrt -run '^$' -bench CrashPoint -benchmem
func BenchmarkCrashPoint(b *testing.B) {
	ctx := context.Background()
	off := &Engine[int]{}
	on := &Engine[int]{opt: options{hooks: hooks.State{Crash: func(context.Context, hooks.Point, string) error { return nil }}}}
	var sink error
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			sink = ctx.Err()
		}
	})
	b.Run("disabled", func(b *testing.B) {
		for b.Loop() {
			sink = off.hit(ctx, hooks.PointUnitStart, "billing:invoice:1")
		}
	})
	b.Run("enabled-noop-hook", func(b *testing.B) {
		for b.Loop() {
			sink = on.hit(ctx, hooks.PointUnitStart, "billing:invoice:1")
		}
	})
	_ = sink
}
