package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// envName returns the environment variable that sets a flag.
func envName(flagName string) string {
	return "PULSELB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// setFromEnv sets every flag of fs that the parsed command line left unset
// and whose environment variable is set, so the command line overrides the
// environment. It returns the names of the flags it set.
func setFromEnv(fs *flag.FlagSet) (map[string]bool, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fromEnv := map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || given[f.Name] {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
		}
		fromEnv[f.Name] = true
	})
	return fromEnv, errors.Join(errs...)
}

// parseFlags parses a subcommand's command line the same way for every
// role: usage from usage, flags the command line left unset taken from
// their PULSELB_* variables, no positional arguments. It returns the flags
// set from the environment, and ok false with the exit code when the
// command must stop (0 after -h, 2 on a bad flag or argument).
func parseFlags(fs *flag.FlagSet, usage string, args []string, stderr io.Writer) (fromEnv map[string]bool, code int, ok bool) {
	return parseCommandLine(fs, usage, args, stderr, true)
}

// parseArgs is parseFlags for a command that takes nothing from the
// environment (the demo).
func parseArgs(fs *flag.FlagSet, usage string, args []string, stderr io.Writer) (code int, ok bool) {
	_, code, ok = parseCommandLine(fs, usage, args, stderr, false)
	return code, ok
}

func parseCommandLine(fs *flag.FlagSet, usage string, args []string, stderr io.Writer, env bool) (fromEnv map[string]bool, code int, ok bool) {
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	if env {
		var err error
		if fromEnv, err = setFromEnv(fs); err != nil {
			fmt.Fprintf(stderr, "pulselb %s: %v\n", fs.Name(), err)
			return nil, 2, false
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pulselb %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return nil, 2, false
	}
	return fromEnv, 0, true
}

// setVerbosity sets klog's -v without adding klog's many flags to ours.
func setVerbosity(v int) {
	var kfs flag.FlagSet
	klog.InitFlags(&kfs)
	_ = kfs.Set("v", strconv.Itoa(v))
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}
