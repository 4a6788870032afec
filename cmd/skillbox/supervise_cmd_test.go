package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJobConfinementFlags: the supervise flags give the confinement asked
// for or refuse; never less than was asked.
func TestJobConfinementFlags(t *testing.T) {
	for _, tc := range []struct {
		name           string
		uid, gid       int
		gidSet, netns  bool
		wantUID, wantG int // 0: no confinement
		wantErr        string
	}{
		{name: "off"},
		{name: "uid", uid: 65534, wantUID: 65534, wantG: 65534},
		{name: "uid and gid", uid: 65534, gid: 65533, gidSet: true, netns: true, wantUID: 65534, wantG: 65533},
		{name: "netns without uid", netns: true, wantErr: "set --job-uid"},
		{name: "gid without uid", gid: 5, gidSet: true, wantErr: "set --job-uid"},
		{name: "root gid", uid: 65534, gid: 0, gidSet: true, wantErr: "gid 0"},
		{name: "negative uid", uid: -2, wantErr: "uid -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := jobConfinement(tc.uid, tc.gid, tc.netns, "/work", tc.gidSet)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantUID == 0 {
				if c != nil {
					t.Fatalf("confinement %+v, want none", c)
				}
				return
			}
			if c == nil || c.UID != tc.wantUID || c.GID != tc.wantG || c.NetNS != tc.netns || c.WorkDir != "/work" {
				t.Fatalf("confinement %+v", c)
			}
		})
	}
}

// TestAgentTLS: --listen serves mutual TLS or nothing.
func TestAgentTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cert, keyFile, noPEM := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "empty.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	os.WriteFile(noPEM, []byte("nothing"), 0o600)
	for _, tc := range []struct {
		name                string
		cert, key, ca, want string
		usage               bool
	}{
		{"no client CA", cert, keyFile, "", "--listen needs --tls-cert, --tls-key and --client-ca", true},
		{"no certificate", "", keyFile, cert, "--listen needs", true},
		{"no key file", cert, filepath.Join(dir, "none"), cert, "no such file", false},
		{"CA without a certificate", cert, keyFile, noPEM, "no PEM certificate", false},
		{"mutual TLS", cert, keyFile, cert, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := agentTLS(tc.cert, tc.key, tc.ca)
			if tc.want == "" {
				if err != nil || cfg.ClientAuth == tls.NoClientCert || cfg.VerifyConnection == nil || cfg.MinVersion != tls.VersionTLS13 || len(cfg.Certificates) != 1 {
					t.Fatalf("got %+v, %v: want client certificates required and verified", cfg, err)
				}
				return
			}
			var ee *exitError
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ee) != tc.usage {
				t.Errorf("got %v, want an error saying %q (usage error: %v)", err, tc.want, tc.usage)
			}
		})
	}
}
