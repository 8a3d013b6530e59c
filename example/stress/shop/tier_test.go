package shop

import (
	"flag"
	"os"
	"testing"
)

// The stress spec's crash simulations belong to the stress tier. With
// IDEMGEN_STRESS set (.ci/run's stress step, which plays this package's
// matrices many times over, several processes at once) a run plays the
// whole matrix on both databases; the default go test ./... plays the
// -short sample, as the goldens' packages do: the example's own packages
// already play their whole matrices there, and this one's took 30 to 50 s
// of the default suite's five minutes.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("IDEMGEN_STRESS") == "" {
		_ = flag.Set("test.short", "true")
	}
	os.Exit(m.Run())
}
