package prober

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DirSecrets is a SecretSource that reads Secrets laid out the way a
// Kubernetes Secret volume is: the password of Secret NAME is the file
// DIR/NAME/password. The value is trimmed of one trailing newline.
type DirSecrets string

// Password returns the password of the named Secret.
func (d DirSecrets) Password(_ context.Context, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("secret name %q is not a single path element", name)
	}
	b, err := os.ReadFile(filepath.Join(string(d), name, "password"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("secret %q has no password file in %s", name, string(d))
		}
		return "", fmt.Errorf("reading secret %q: %w", name, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}
