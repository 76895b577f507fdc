// Package cpuprofile owns the -cpuprofile flag of the benchmarks' child
// processes: the pulselb side of a run profiled on its own.
package cpuprofile

import (
	"log"
	"os"
	"runtime/pprof"
)

// Start starts writing a CPU profile to path, or does nothing when path is
// empty, and returns the function that stops it. A child that cannot
// profile as asked exits (log.Fatal): its numbers would not be the ones
// the caller wanted to see.
func Start(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	return pprof.StopCPUProfile
}
