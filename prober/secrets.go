package prober

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulselb/pulselb/files"
)

// DirSecrets is a SecretSource that reads Secrets laid out the way a
// Kubernetes Secret volume is: the password of Secret NAME is the file
// DIR/NAME/password. The value is trimmed of one trailing newline.
type DirSecrets string

// MaxSecretBytes caps a password file: a password is a line, and a path
// such as /dev/zero must end in an error, not in memory exhaustion.
const MaxSecretBytes = 64 << 10

// PasswordFile is the file that holds the password of the named Secret.
func (d DirSecrets) PasswordFile(name string) string {
	return filepath.Join(string(d), name, "password")
}

// Password returns the password of the named Secret, read with files.Read:
// a password file that is not a regular file or is larger than
// MaxSecretBytes is an error naming it.
func (d DirSecrets) Password(_ context.Context, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("secret name %q is not a single path element", name)
	}
	b, err := files.Read(d.PasswordFile(name), MaxSecretBytes, "a password file")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("secret %q has no password file in %s", name, string(d))
		}
		return "", fmt.Errorf("reading secret %q: %w", name, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}
