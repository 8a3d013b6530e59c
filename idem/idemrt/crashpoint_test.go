package idemrt

import (
	"context"
	"testing"
)

// BenchmarkCrashPoint prints the cost of a crash point beside a baseline in
// one run: production jobs have no hook, so a point is one nil check.
//
//	go test ./idem -run '^$' -bench CrashPoint -benchmem
func BenchmarkCrashPoint(b *testing.B) {
	ctx := context.Background()
	off := &Engine[int]{}
	on := &Engine[int]{opt: options{hook: func(context.Context, CrashPoint, string) error { return nil }}}
	var sink error
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			sink = ctx.Err()
		}
	})
	b.Run("disabled", func(b *testing.B) {
		for b.Loop() {
			sink = off.hit(ctx, PointUnitStart, "billing:invoice:1")
		}
	})
	b.Run("enabled-noop-hook", func(b *testing.B) {
		for b.Loop() {
			sink = on.hit(ctx, PointUnitStart, "billing:invoice:1")
		}
	})
	_ = sink
}
