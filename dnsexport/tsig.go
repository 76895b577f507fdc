package dnsexport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// TSIGKey is a shared secret a secondary authenticates zone transfers
// with (and the server signs NOTIFY with). Only hmac-sha256 is accepted.
type TSIGKey struct {
	// Name is the key's name, e.g. "pulselb-xfr", as in the secondary's
	// configuration.
	Name string
	// Secret is the base64 secret, as `tsig-keygen -a hmac-sha256` prints it.
	Secret string
}

// keyring is the set of TSIG keys the server accepts, by lower-case FQDN.
// It implements dns.TsigProvider for hmac-sha256 only, so a client cannot
// downgrade a key to a weaker algorithm.
type keyring map[string][]byte

func newKeyring(keys []TSIGKey) (keyring, error) {
	kr := keyring{}
	for _, k := range keys {
		name, err := canonicalName(k.Name)
		if err != nil {
			return nil, fmt.Errorf("tsig key name %q: %w", k.Name, err)
		}
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("tsig key %s: secret is not base64: %w", name, err)
		}
		if len(secret) < 16 {
			return nil, fmt.Errorf("tsig key %s: secret has %d bytes, want at least 16", name, len(secret))
		}
		if _, dup := kr[name]; dup {
			return nil, fmt.Errorf("tsig key %s: defined twice", name)
		}
		kr[name] = secret
	}
	return kr, nil
}

func (kr keyring) key(t *dns.TSIG) ([]byte, error) {
	if !strings.EqualFold(t.Algorithm, dns.HmacSHA256) {
		return nil, dns.ErrKeyAlg
	}
	secret, ok := kr[strings.ToLower(t.Hdr.Name)]
	if !ok {
		return nil, dns.ErrSecret
	}
	return secret, nil
}

// Generate implements dns.TsigProvider.
func (kr keyring) Generate(msg []byte, t *dns.TSIG) ([]byte, error) {
	secret, err := kr.key(t)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write(msg)
	return m.Sum(nil), nil
}

// Verify implements dns.TsigProvider.
func (kr keyring) Verify(msg []byte, t *dns.TSIG) error {
	want, err := kr.Generate(msg, t)
	if err != nil {
		return err
	}
	got, err := hex.DecodeString(t.MAC)
	if err != nil {
		return dns.ErrSig
	}
	if !hmac.Equal(got, want) {
		return dns.ErrSig
	}
	return nil
}
