package probespec

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// domainName returns v fully qualified (with a final dot), as the DNS probe
// sends it, and whether v is a domain name in presentation format: labels
// of at most 63 octets, where \X stands for the character X and \DDD for
// the octet of that decimal value, in a name of at most 255 octets on the
// wire. The DNS library the probe runs on accepts exactly these names
// (TestDomainName).
func domainName(v string) (string, error) {
	errName := errors.New("not a domain name")
	if v == "" {
		return "", errName
	}
	fq := v
	if !endsInDot(v) {
		fq += "."
	}
	const maxWire, maxLabel = 256, 63
	wire, label := 0, 0
	escaped, dot := false, false
	for i := 0; i < len(fq); i++ {
		switch fq[i] {
		case '\\':
			// The escape stands for one octet: \DDD or \X.
			escaped = !escaped
			if i+3 < len(fq) && isDigit(fq[i+1]) && isDigit(fq[i+2]) && isDigit(fq[i+3]) {
				i += 3
			} else {
				i++
			}
			label++
			dot = false
		case '.':
			escaped = false
			if i == 0 && len(fq) > 1 || dot || label > maxLabel {
				return "", errName
			}
			dot = true
			wire += 1 + label
			if wire > maxWire {
				return "", errName
			}
			label = 0
		default:
			escaped, dot = false, false
			label++
		}
	}
	if escaped {
		return "", errName
	}
	if !endsInDot(fq) {
		// A name ending in a lone backslash escapes the dot added to it.
		return "", errors.New("not a domain name: ends with a lone backslash")
	}
	return fq, nil
}

// endsInDot reports whether v ends in a dot that no backslash escapes,
// counting as the DNS library does: the backslashes before the dot plus
// the bytes of the character before them, which is one for every name but
// those with a multi-byte character right before an escaped final dot.
func endsInDot(v string) bool {
	if v == "" || v[len(v)-1] != '.' {
		return false
	}
	rest := strings.TrimRight(v[:len(v)-1], `\`)
	n := len(v) - 1 - len(rest)
	if n == 0 {
		return true
	}
	size := 1
	if rest != "" {
		_, size = utf8.DecodeLastRuneInString(rest)
	}
	return (n+size)%2 != 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
