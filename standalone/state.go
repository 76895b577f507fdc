package standalone

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pulselb/pulselb/status"
)

// stateVersion is the format of the state file. Version 1 had no
// addresses: its verdicts cannot be matched to the addresses they were
// reached at, and are not restored.
const stateVersion = 2

// stateFile is what the state file holds: the verdict on every target and
// since when, so that a restarted instance answers DNS with what it knew
// instead of starting from Unknown.
type stateFile struct {
	Version  int                    `json:"version"`
	Instance string                 `json:"instance"`
	SavedAt  time.Time              `json:"savedAt"`
	Targets  map[string]savedTarget `json:"targets"`
}

type savedTarget struct {
	Verdict string    `json:"verdict"`
	Since   time.Time `json:"since,omitzero"`
	// Address is where the target was probed; Addresses are its host's
	// published addresses then. A verdict is restored only for the same
	// place (movedHost).
	Address   netip.AddrPort `json:"address"`
	Addresses []netip.Addr   `json:"addresses"`
}

// loadState reads the verdicts saved at path. A missing file is no error:
// every target starts Unknown.
func loadState(path string) (map[string]savedVerdict, error) {
	out := map[string]savedVerdict{}
	if path == "" {
		return out, nil
	}
	b, err := readFile(path, MaxStateBytes, "a state file")
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("reading state file: %w", err)
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return out, fmt.Errorf("parsing state file %s: %w", path, err)
	}
	if sf.Version != stateVersion {
		return out, fmt.Errorf("state file %s has version %d, want %d", path, sf.Version, stateVersion)
	}
	for k, t := range sf.Targets {
		v := savedVerdict{since: t.Since, addr: t.Address, hostAddrs: t.Addresses}
		switch t.Verdict {
		case "Up":
			v.verdict = status.VerdictUp
		case "Down":
			v.verdict = status.VerdictDown
		default:
			continue
		}
		out[k] = v
	}
	return out, nil
}

// savedVerdict is one target's verdict in the state file: since when, and
// where it was reached.
type savedVerdict struct {
	verdict   status.Verdict
	since     time.Time
	addr      netip.AddrPort
	hostAddrs []netip.Addr
}

// movedHost reports whether a verdict reached probing a target at from,
// its host published at fromAddrs, says nothing about the target now at
// to, published at toAddrs: the host moved when both its probe address
// and its published addresses changed. (A new probe address alone is
// another path to the same host, whose verdict stands until the probes
// of the new path conclude.) Reloads and restarts both apply it.
func movedHost(from, to netip.AddrPort, fromAddrs, toAddrs []netip.Addr) bool {
	return from != to && !slices.Equal(fromAddrs, toAddrs)
}

// saveState writes the verdicts to path atomically: a crash leaves the old
// file or the new one, never half of one.
func saveState(path, instance string, now time.Time, verdicts map[string]savedVerdict) error {
	sf := stateFile{Version: stateVersion, Instance: instance, SavedAt: now.UTC(), Targets: map[string]savedTarget{}}
	for k, v := range verdicts {
		if v.verdict == status.VerdictUnknown {
			continue
		}
		sf.Targets[k] = savedTarget{Verdict: v.verdict.String(), Since: v.since.UTC(), Address: v.addr, Addresses: v.hostAddrs}
	}
	b, err := json.MarshalIndent(sf, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), tempPrefix(path)+"*")
	if err != nil {
		return fmt.Errorf("writing state file: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing state file %s: %w", path, err)
	}
	return nil
}

// tempPrefix is how the temporary files saveState writes next to path
// begin; os.CreateTemp ends their names with decimal digits.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// removeStaleTemps removes the temporary files that saveState left next to
// path when the process was killed in the middle of a write, and only
// those: names of tempPrefix(path) and digits. It returns the names
// removed. Call it before the first save: at run time a name of that form
// may be a write in progress.
func removeStaleTemps(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	dir, prefix := filepath.Dir(path), tempPrefix(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing state file directory: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing stale state file: %w", err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
