package dnsexport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestTSIGErrors sends queries signed with an unknown key, a wrong
// secret and a time outside the fudge, over UDP and TCP, for a query, an
// AXFR, an IXFR and a NOTIFY: each gets NOTAUTH with a TSIG record that
// names the error (RFC 8945 section 5.2), unsigned for BADKEY and BADSIG,
// signed with the server's time for BADTIME.
func TestTSIGErrors(t *testing.T) {
	srv := startServer(t, transferConfig(), testServices())
	now := time.Now().Unix()
	type signer struct {
		key, secret string
		signed      int64
	}
	signers := []struct {
		name  string
		s     signer
		error uint16
	}{
		{"unknown key", signer{"nokey.", testSecret, now}, dns.RcodeBadKey},
		{"wrong secret", signer{"xfr.", otherSecret, now}, dns.RcodeBadSig},
		{"time outside the fudge", signer{"xfr.", testSecret, now - 3600}, dns.RcodeBadTime},
	}
	messages := []struct {
		name string
		msg  func() *dns.Msg
		tcp  bool // only over TCP
	}{
		{"SOA query", func() *dns.Msg { return query(testOrigin, dns.TypeSOA) }, false},
		{"AXFR", func() *dns.Msg { return query(testOrigin, dns.TypeAXFR) }, true},
		{"IXFR", func() *dns.Msg { m := new(dns.Msg); m.SetIxfr(testOrigin, 1, "ns.", "h."); return m }, false},
		{"NOTIFY", func() *dns.Msg { m := new(dns.Msg); m.SetNotify(testOrigin); return m }, false},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, sg := range signers {
			for _, mt := range messages {
				if mt.tcp && network == "udp" {
					continue
				}
				t.Run(network+"/"+sg.name+"/"+mt.name, func(t *testing.T) {
					m := mt.msg()
					m.SetTsig(sg.s.key, dns.HmacSHA256, 300, sg.s.signed)
					packet, mac, err := dns.TsigGenerate(m, sg.s.secret, "", false)
					if err != nil {
						t.Fatal(err)
					}
					reply := rawExchange(t, network, srv.Addr(), packet)
					r := new(dns.Msg)
					if err := r.Unpack(reply); err != nil {
						t.Fatal(err)
					}
					if r.Rcode != dns.RcodeNotAuth {
						t.Errorf("rcode %s, want NOTAUTH", dns.RcodeToString[r.Rcode])
					}
					rt := r.IsTsig()
					if rt == nil {
						t.Fatalf("no TSIG record in the reply:\n%v", r)
					}
					if rt.Error != sg.error || !strings.EqualFold(rt.Hdr.Name, sg.s.key) {
						t.Errorf("TSIG error %s for key %s, want %s for %s", dns.RcodeToString[int(rt.Error)], rt.Hdr.Name, dns.RcodeToString[int(sg.error)], sg.s.key)
					}
					if sg.error != dns.RcodeBadTime {
						if rt.MACSize != 0 {
							t.Errorf("%s reply signed (MAC size %d): RFC 8945 says unsigned", dns.RcodeToString[int(sg.error)], rt.MACSize)
						}
						return
					}
					// BADTIME: signed with the right key over the
					// request's MAC, and carrying the server's time.
					if err := verifyTSIG(reply, r, testSecret, mac); err != nil {
						t.Errorf("BADTIME reply: %v", err)
					}
					server, err := strconv.ParseInt(rt.OtherData, 16, 64)
					if rt.OtherLen != 6 || err != nil || server < now-5 || server > now+60 {
						t.Errorf("BADTIME other data %q (%d bytes): want the server's time", rt.OtherData, rt.OtherLen)
					}
				})
			}
		}
	}
}

// verifyTSIG checks the MAC of reply (r unpacked) as RFC 8945 section
// 4.3 defines it, over the request's MAC. miekg/dns refuses to verify a
// NOTAUTH reply at all, so the test does it by hand.
func verifyTSIG(reply []byte, r *dns.Msg, secret, requestMAC string) error {
	rt := r.IsTsig()
	if rt.MACSize != sha256.Size {
		return fmt.Errorf("MAC of %d bytes, want a signed reply", rt.MACSize)
	}
	// What was signed: the reply without its TSIG record (the last
	// one), with the additional count before it was added and the
	// original ID.
	signed := slices.Clone(reply[:len(reply)-dns.Len(rt)])
	binary.BigEndian.PutUint16(signed[0:], rt.OrigId)
	binary.BigEndian.PutUint16(signed[10:], binary.BigEndian.Uint16(signed[10:])-1)
	reqMAC, _ := hex.DecodeString(requestMAC)
	other, _ := hex.DecodeString(rt.OtherData)
	key, _ := base64.StdEncoding.DecodeString(secret)
	h := hmac.New(sha256.New, key)
	h.Write(binary.BigEndian.AppendUint16(nil, uint16(len(reqMAC))))
	h.Write(reqMAC)
	h.Write(signed)
	name := make([]byte, 256)
	n, _ := dns.PackDomainName(dns.CanonicalName(rt.Hdr.Name), name, 0, nil, false)
	h.Write(name[:n])
	h.Write([]byte{0, dns.ClassANY, 0, 0, 0, 0})
	n, _ = dns.PackDomainName(dns.CanonicalName(rt.Algorithm), name, 0, nil, false)
	h.Write(name[:n])
	h.Write([]byte{byte(rt.TimeSigned >> 40), byte(rt.TimeSigned >> 32), byte(rt.TimeSigned >> 24), byte(rt.TimeSigned >> 16), byte(rt.TimeSigned >> 8), byte(rt.TimeSigned)})
	h.Write(binary.BigEndian.AppendUint16(nil, rt.Fudge))
	h.Write(binary.BigEndian.AppendUint16(nil, rt.Error))
	h.Write(binary.BigEndian.AppendUint16(nil, uint16(len(other))))
	h.Write(other)
	if got, _ := hex.DecodeString(rt.MAC); !hmac.Equal(got, h.Sum(nil)) {
		return errors.New("MAC does not verify with the key over the request's MAC")
	}
	return nil
}

// TestTSIGErrorsWithDig asks with dig: its output names the TSIG error,
// so an operator sees why a transfer or query was refused.
func TestTSIGErrorsWithDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed")
	}
	srv := startServer(t, transferConfig(), testServices())
	tests := []struct {
		name, key, want string
	}{
		{"unknown key", "hmac-sha256:nokey:" + testSecret, "BADKEY"},
		{"wrong secret", "hmac-sha256:xfr:" + otherSecret, "BADSIG"},
	}
	for _, tc := range tests {
		for _, qtype := range []string{"SOA", "AXFR"} {
			t.Run(tc.name+"/"+qtype, func(t *testing.T) {
				out, _ := exec.Command(dig, "@"+srv.Addr().Addr().String(), "-p", fmt.Sprint(srv.Addr().Port()),
					"+tries=1", "+time=2", "-y", tc.key, testOrigin, qtype).CombinedOutput()
				t.Logf("dig:\n%s", out)
				if !strings.Contains(string(out), tc.want) {
					t.Errorf("dig output does not name %s:\n%s", tc.want, out)
				}
			})
		}
	}
}
