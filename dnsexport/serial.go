package dnsexport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pulselb/pulselb/files"
)

// serials hands out SOA serials that increase on every change and across
// restarts.
//
// The serial is the Unix time in seconds, or the last serial plus one when
// that is not larger (RFC 1982 serial arithmetic). Time makes serials
// survive a restart without state and keeps the serials of several
// controller replicas close; "+1" makes two changes within one second
// distinct. Only when changes come faster than one a second for a while
// does the serial run ahead of the clock; a restart before the clock
// catches up could then go backwards, which the optional state file
// prevents: when set, the last serial is written to it (atomically) before
// it is used, and read back at start.
type serials struct {
	mu   sync.Mutex
	path string
	last uint32
	now  func() time.Time
}

// newSerials reads the state file at path, if any. A file whose content
// is not a serial (empty, garbage, cut short by a crash or a full disk) is
// no reason to stop serving: it is ignored, the serial starts from the
// clock as without a file, and ignored says why. Only a file that cannot
// be read is an error, since it could not be written either.
// maxSerialFile caps the serial file, which holds one decimal number: a
// device or a huge file in its place must neither fill memory nor block.
const maxSerialFile = 4 << 10

func newSerials(path string, now func() time.Time) (s *serials, ignored, err error) {
	s = &serials{path: path, now: now}
	if path == "" {
		return s, nil, nil
	}
	b, err := files.Read(path, maxSerialFile, "a serial file")
	switch {
	case os.IsNotExist(err):
		return s, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading serial state: %w", err)
	}
	last, err := parseSerial(b)
	if err != nil {
		return s, fmt.Errorf("parsing the serial file: %w", err), nil
	}
	s.last = last
	return s, nil, nil
}

// parseSerial reads the content of a serial file as next writes it: the
// serial in decimal and a newline.
func parseSerial(b []byte) (uint32, error) {
	text, complete := strings.CutSuffix(string(b), "\n")
	text = strings.TrimSpace(text)
	v, err := strconv.ParseUint(text, 10, 32)
	switch {
	case len(b) == 0:
		return 0, errors.New("empty")
	case err != nil:
		return 0, fmt.Errorf("%.40q is not a serial number (0 to 4294967295)", text)
	case !complete:
		// Every write ends with a newline: without it the number may
		// have lost digits.
		return 0, fmt.Errorf("%q is cut short (no final newline)", text)
	}
	return uint32(v), nil
}

// atLeast makes the next serial larger than serial when serial is ahead
// of the clock and of the last serial: a serial a secondary holds, when
// the file that knew the last one was lost.
func (s *serials) atLeast(serial uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := uint32(s.now().Unix())
	if s.last != 0 && serialLess(n, s.last) {
		n = s.last
	}
	if serialLess(n, serial) {
		s.last = serial
	}
}

// next returns a serial larger than every serial returned before.
func (s *serials) next() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := uint32(s.now().Unix())
	if s.last != 0 && !serialLess(s.last, n) {
		n = s.last + 1
	}
	if n == 0 { // 0 reads as "no serial yet"; skip it on wrap-around.
		n = 1
	}
	if s.path != "" {
		if err := writeFileAtomic(s.path, []byte(strconv.FormatUint(uint64(n), 10)+"\n")); err != nil {
			return 0, fmt.Errorf("saving serial state: %w", err)
		}
	}
	s.last = n
	return n, nil
}

// serialLess is a < b in RFC 1982 serial number arithmetic.
func serialLess(a, b uint32) bool {
	return a != b && int32(b-a) > 0
}

func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".serial-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
