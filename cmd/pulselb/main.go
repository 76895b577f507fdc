// Command pulselb is the one binary of pulselb. Each role is a subcommand.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand: it parses its own flags from args and returns
// the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"check":      {"probe one target once or a few times and print the outcome", runCheck},
	"controller": {"serve LoadBalancer Services with proxy workloads and keep their status", runController},
	"prober":     {"probe assigned targets and node beacons, write this node's ProbeReport", runProber},
	"proxy":      {"forward a Service's ports in a proxy pod to its ClusterIP", runProxy},
	"proxy-init": {"turn on IP forwarding in a proxy pod (init container)", runProxyInit},
	"standalone": {"probe hosts from a YAML file and serve the healthy ones in DNS, without a cluster", runStandalone},
	"demo":       {"run standalone against three loopback hosts, fail one and show DNS follow", runDemo},
	"version":    {"print the version, commit, Go version and platform", runVersion},

	"vantage-kubeconfig": {"write an external vantage's kubeconfig from its ServiceAccount token", runVantageKubeconfig},
}

func main() {
	setMemoryLimit("/sys/fs/cgroup")
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "pulselb: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: pulselb COMMAND [flags]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-19s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'pulselb COMMAND -h' for a command's flags.")
}
