package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/pulselb/pulselb/proxy"
)

const proxyInitUsage = `Usage: pulselb proxy-init [--ipv6]

Turns on IP forwarding in this network namespace (the proxy pod's) and
exits; run it as the proxy pod's init container, the one privileged piece.
A sysctl that is already on is left alone. Flags may also be set from the
environment (--ipv6 is PULSELB_IPV6).

Exit status: 0 when forwarding is on, 1 when it cannot be turned on, 2 for a
bad flag.

Flags:
`

func runProxyInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy-init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ipv6 := fs.Bool("ipv6", false, "turn on IPv6 forwarding too (for a dual-stack or IPv6 Service)")
	procSys := fs.String("proc-sys", proxy.DefaultProcSys, "where the sysctls are mounted")
	if _, code, ok := parseFlags(fs, proxyInitUsage, args, stderr); !ok {
		return code
	}
	if err := proxy.EnableForwarding(*procSys, *ipv6); err != nil {
		fmt.Fprintf(stderr, "pulselb proxy-init: %v\n", err)
		return 1
	}
	if *ipv6 {
		fmt.Fprintln(stdout, "IPv4 and IPv6 forwarding are on")
	} else {
		fmt.Fprintln(stdout, "IPv4 forwarding is on")
	}
	return 0
}
