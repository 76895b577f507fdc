package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
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
			errs = append(errs, fmt.Errorf("%s=%q (sets --%s): %w", envName(f.Name), v, f.Name, describeFlagError(f, err)))
		}
		fromEnv[f.Name] = true
	})
	return fromEnv, errors.Join(errs...)
}

// describeFlagError explains why a value does not fit flag f, naming the
// form f wants. The flag package's own values fail with a bare "parse
// error" or "value out of range"; values of other types already say what
// is wrong.
func describeFlagError(f *flag.Flag, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if !strings.Contains(msg, "parse error") && !strings.Contains(msg, "value out of range") {
		return err
	}
	typ, _ := flag.UnquoteUsage(f)
	switch typ {
	case "duration":
		return errors.New("want a duration, such as 30s or 1m30s")
	case "int":
		return errors.New("want a whole number")
	case "uint":
		return errors.New("want a whole number from 0")
	case "float":
		return errors.New("want a number")
	case "":
		return errors.New("want true or false")
	}
	return fmt.Errorf("%w (want a %s)", err, typ)
}

// flagValueError matches the flag package's error for a value its flag
// rejects: the value (quoted), the flag's name and the cause.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// parseFlagSet is fs.Parse, except that a value of the wrong type is
// reported as a variable's is, naming the flag and the form it wants
// (describeFlagError) rather than "parse error", before the usage.
func parseFlagSet(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	if !errors.Is(err, flag.ErrHelp) {
		msg := err.Error()
		if m := flagValueError.FindStringSubmatch(msg); m != nil {
			if f := fs.Lookup(m[2]); f != nil {
				msg = fmt.Sprintf("pulselb %s: --%s=%s: %v", fs.Name(), f.Name, m[1], describeFlagError(f, errors.New(m[3])))
			}
		}
		fmt.Fprintln(out, msg)
	}
	fs.Usage()
	return err
}

// checkListenAddress returns an error unless s is a HOST:PORT a server can
// listen on: an IP address, a host name or nothing, and a port number.
func checkListenAddress(s string) error {
	const want = "want HOST:PORT with an IP address or an empty host, such as 127.0.0.1:9470 or :9470"
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New(want)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s; port %q is not a number from 0 to 65535", want, port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%s; %q is not an IP address", want, host)
		}
	}
	return nil
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
	if err := parseFlagSet(fs, args); err != nil {
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
