package main

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// riverParallel is how many of the River tests' cases run at once when
// go test is not told (-parallel). They are the package's only parallel
// tests, and they wait rather than compute: for River's leader to expire
// (about 15 s after a killed one, not configurable) and its rescuer to
// hand the dead worker's jobs on. At go test's default, one per CPU, two
// cores ran them two at a time: 34 of the package's 100 s.
const riverParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < riverParallel {
		_ = flag.Set("test.parallel", strconv.Itoa(riverParallel))
	}
	os.Exit(m.Run())
}
