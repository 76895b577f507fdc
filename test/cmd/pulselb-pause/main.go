// Command pulselb-pause is the pod sandbox ("pause") process of the
// harness' real kubelet nodes: it holds the pod's namespaces and sleeps
// until SIGTERM or SIGINT. Built static, it is the whole pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
