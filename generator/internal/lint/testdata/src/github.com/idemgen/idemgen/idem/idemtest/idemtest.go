// Package idemtest stands in for idemgen's test package.
package idemtest

import "time"

// WithLeaseClock stands in for the hook.
func WithLeaseClock(now func() time.Time) func() time.Time { return now }
