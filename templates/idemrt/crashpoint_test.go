package idemrt

import (
	"context"
	"testing"
)

// BenchmarkCrashPoint prints the cost of a crash point beside a baseline in
// one run: production jobs have no hook, so a point is one nil check.
//
//	go test ./templates/idemrt -run '^$' -bench CrashPoint -benchmem
func BenchmarkCrashPoint(b *testing.B) {
	ctx := context.Background()
	off := &engine[int]{}
	on := &engine[int]{opt: options{hook: func(context.Context, crashPoint, string) error { return nil }}}
	var sink error
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			sink = ctx.Err()
		}
	})
	b.Run("disabled", func(b *testing.B) {
		for b.Loop() {
			sink = off.hit(ctx, pointUnitStart, "billing:invoice:1")
		}
	})
	b.Run("enabled-noop-hook", func(b *testing.B) {
		for b.Loop() {
			sink = on.hit(ctx, pointUnitStart, "billing:invoice:1")
		}
	})
	_ = sink
}
