package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// natsIdentities are the service identities of infra/nats/accounts.conf:
// user name, and the variable that holds its password (the server's
// configuration reads it from its environment, the services through
// nats.password_env).
var natsIdentities = []struct{ user, passwordEnv string }{
	{"gateway", "NATS_GATEWAY_PASSWORD"},
	{"analyzer", "NATS_ANALYZER_PASSWORD"},
	{"collector", "NATS_COLLECTOR_PASSWORD"},
}

// natsAPIPrefix is where a service of the shipped layout reaches the
// JetStream API (nats.api_prefix, infra/nats/README.md).
const natsAPIPrefix = "JS.graygate.API"

// natsAuth is what `up`'s server needs to run infra/nats/nats-server.conf
// and what its clients need to use it: a development CA and a server
// certificate, and a password per service identity. All of it lives under
// .data/nats-auth (0700; keys and passwords 0600) and is made once, so a
// running server and the services started later agree.
type natsAuth struct {
	dir                     string
	caFile, certFile, keyFP string
	passwords               map[string]string // by user
}

// env is the server's environment beyond devenv's own: the variables
// nats-server.conf reads (NATS_TLS_*, NATS_*_PASSWORD).
func (a *natsAuth) env() []string {
	e := []string{"NATS_TLS_CA=" + a.caFile, "NATS_TLS_CERT=" + a.certFile, "NATS_TLS_KEY=" + a.keyFP}
	for _, id := range natsIdentities {
		e = append(e, id.passwordEnv+"="+a.passwords[id.user])
	}
	return e
}

// ensureNATSAuth reads or makes the certificates and passwords under
// .data/nats-auth. A certificate that does not verify against the CA, or
// expires within a day, is made again (with its CA); a running server then
// fails devenv's check with the new ones and is restarted.
func ensureNATSAuth(l layout) (*natsAuth, error) {
	dir := filepath.Join(l.data, "nats-auth")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	a := &natsAuth{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "server.pem"),
		keyFP: filepath.Join(dir, "server-key.pem"), passwords: map[string]string{}}
	if err := checkDevCertificates(a.caFile, a.certFile, a.keyFP); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			logf("nats: development certificates in %s: %v; making new ones", l.rel(dir), err)
		}
		if err := makeDevCertificates(a.caFile, a.certFile, a.keyFP); err != nil {
			return nil, fmt.Errorf("development certificates: %w", err)
		}
		logf("nats: made a development CA and server certificate in %s", l.rel(dir))
	}
	for _, id := range natsIdentities {
		pw, err := devPassword(filepath.Join(dir, id.user+".password"))
		if err != nil {
			return nil, fmt.Errorf("password of %s: %w", id.user, err)
		}
		a.passwords[id.user] = pw
	}
	return a, nil
}

// devPassword reads the password in file, making it first when the file is
// missing or does not hold one devPassword made: "p" and 32 hex digits. It
// starts with a letter because nats-server reads an environment variable
// as a config value, and 2.9 takes one starting with a digit for a number
// (infra/nats/README.md).
func devPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil && validDevPassword(strings.TrimSpace(string(b))) {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	r := make([]byte, 16)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	pw := "p" + hex.EncodeToString(r)
	if err := writeSecret(file, []byte(pw+"\n")); err != nil {
		return "", err
	}
	return pw, nil
}

func validDevPassword(s string) bool {
	if len(s) != 33 || s[0] != 'p' {
		return false
	}
	_, err := hex.DecodeString(s[1:])
	return err == nil
}

// writeSecret writes a file readable by its owner only, through a
// temporary file so that a reader never sees half of it.
func writeSecret(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an older tmp file keeps its mode
		return err
	}
	return os.Rename(tmp, path)
}

// devCertHosts are the names the development server certificate is for:
// the loopback addresses `up` listens on and localhost.
var devCertHosts = struct {
	dns []string
	ips []net.IP
}{[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}}

// makeDevCertificates writes a throwaway ECDSA P-256 CA and a server
// certificate it signs, for localhost, 127.0.0.1 and ::1, serving both
// server and client authentication like infra/nats/make-dev-certs.sh's
// (a cluster node presents it when it dials another's route). Valid for a
// year; the CA's key is not kept (nothing else is ever signed with it).
func makeDevCertificates(caFile, certFile, keyFile string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "graygate devenv CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		DNSNames: devCertHosts.dns, IPAddresses: devCertHosts.ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeSecret(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// checkDevCertificates reports why the files are not a usable development
// CA and server certificate: missing (os.ErrNotExist), not verifying
// against the CA for every host and both usages, or expiring within a day.
func checkDevCertificates(caFile, certFile, keyFile string) error {
	read := func(p string) (*x509.Certificate, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s holds no certificate", filepath.Base(p))
		}
		return x509.ParseCertificate(blk.Bytes)
	}
	ca, err := read(caFile)
	if err != nil {
		return err
	}
	cert, err := read(certFile)
	if err != nil {
		return err
	}
	if _, err := os.Stat(keyFile); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	soon := time.Now().Add(24 * time.Hour)
	hosts := append([]string{}, devCertHosts.dns...)
	for _, ip := range devCertHosts.ips {
		hosts = append(hosts, ip.String())
	}
	for _, h := range hosts {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: h, CurrentTime: soon}); err != nil {
			return fmt.Errorf("server certificate for %s: %w", h, err)
		}
	}
	// Verify accepts a chain allowing any one usage: both are needed.
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return errors.New("the server certificate lacks serverAuth or clientAuth")
	}
	return nil
}

// connect dials url as a service identity of the shipped layout: its user
// and password, the development CA, and the identity's own inbox prefix
// (each identity may subscribe only to _INBOX_<user>.>).
func (a *natsAuth) connect(url, user, name string) (*nats.Conn, error) {
	pw, ok := a.passwords[user]
	if !ok {
		return nil, fmt.Errorf("no NATS identity %q in infra/nats/accounts.conf", user)
	}
	return nats.Connect(url, nats.UserInfo(user, pw), nats.RootCAs(a.caFile),
		nats.CustomInboxPrefix("_INBOX_"+user), nats.Timeout(2*time.Second), nats.MaxReconnects(0), nats.Name(name))
}
