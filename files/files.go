// Package files reads the files a user points pulselb at (configuration,
// tokens, passwords, state, the DNS serial) by one rule: regular files
// only, of a bounded size, with errors naming the file. It imports nothing
// of pulselb, so every package may use it.
package files

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// Read reads the regular file at path, of at most limit bytes. It is
// the one rule for the files a user points pulselb at (configuration,
// tokens, passwords, state): anything but a regular file, such as a
// device (/dev/zero), a named pipe or a directory, is refused before it is
// opened, so that it can neither block a reader forever nor fill memory;
// a larger file is refused too. Errors name the file; what says what it
// is for, as in "larger than 64 KiB, the most a password file may hold".
func Read(path string, limit int64, what string) ([]byte, error) {
	if err := Check(path, limit, what); err != nil {
		return nil, err
	}
	// A named pipe put in the file's place since the check would block
	// an open without O_NONBLOCK (which a regular file ignores): check
	// what was opened, not only the name.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	// The file may have grown since the check.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooBig(path, limit, what)
	}
	return data, nil
}

// Check returns what Read would refuse path for without reading
// it: that it is missing, not a regular file, or larger than limit.
func Check(path string, limit int64, what string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return notRegular(path, fi.Mode())
	}
	if fi.Size() > limit {
		return tooBig(path, limit, what)
	}
	return nil
}

func notRegular(path string, m os.FileMode) error {
	return fmt.Errorf("%s is not a regular file but %s", path, fileKind(m))
}

func tooBig(path string, limit int64, what string) error {
	return fmt.Errorf("%s is larger than %s, the most %s may hold", path, SizeText(limit), what)
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file"
}

// SizeText reads as "4 MiB" or "4 KiB" for whole multiples, else bytes.
func SizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
