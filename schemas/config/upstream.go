package config

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/url"
	"unicode/utf8"

	"github.com/graygate/graygate/schemas/text"
)

// This file checks an upstream's rev. 2 keys (SPEC §2, §6.6): its TLS
// files, its prompt file, and a gray without url.

// MaxPromptBytes bounds an arm's prompt file (SPEC §6.6).
const MaxPromptBytes = 256 << 10

// maxPEMBytes bounds a CA, certificate or key file.
const maxPEMBytes = 1 << 20

// validateTLS reads the upstream's TLS files, so that a config validate
// accepts builds a TLS client that serve can use.
func (d *decoder) validateTLS(p string, u *Upstream, dir string) {
	t := &u.TLS
	p += ".tls"
	if t.CAFile != "" {
		if data, ok := d.readFile(p+".ca_file", t.CAFile, dir, maxPEMBytes); ok {
			if !x509.NewCertPool().AppendCertsFromPEM(data) {
				d.errorf(p+".ca_file", nil, "%s: no PEM certificate in the file", t.CAFile)
			} else {
				t.CAPEM = data
			}
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
	case t.CertFile == "":
		d.errorf(p+".cert_file", nil, "a client certificate needs both cert_file and key_file (key_file is set)")
	case t.KeyFile == "":
		d.errorf(p+".key_file", nil, "a client certificate needs both cert_file and key_file (cert_file is set)")
	default:
		cert, okc := d.readFile(p+".cert_file", t.CertFile, dir, maxPEMBytes)
		key, okk := d.readFile(p+".key_file", t.KeyFile, dir, maxPEMBytes)
		if okc && okk {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				d.errorf(p+".cert_file", nil, "%s and %s: %v", t.CertFile, t.KeyFile, err)
			} else {
				t.CertPEM, t.KeyPEM = cert, key
			}
		}
	}
	if t.InsecureSkipVerify {
		d.warnf(p+".insecure_skip_verify", nil, "the upstream's certificate is not verified: anyone on the path can read and change its traffic")
	}
	if uu, err := url.Parse(u.URL); err == nil && uu.Scheme == "http" && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		d.warnf(p, nil, "has no effect: the url is http://")
	}
}

// validatePrompt reads an arm's prompt file: UTF-8, at most
// MaxPromptBytes; Hash is the hex SHA-256 of its bytes.
func (d *decoder) validatePrompt(p string, pr *Prompt, dir string) {
	p += ".prompt"
	if pr.Version == "" && !d.failed[p+".version"] {
		d.errorf(p+".version", nil, "a prompt needs a version (it names the prompt in headers and events)")
	} else if err := text.Check("the version", pr.Version); err != nil {
		d.errorf(p+".version", nil, "%v", err)
	}
	switch pr.Mode {
	case "":
		pr.Mode = PromptReplace
	case PromptReplace, PromptPrepend:
	default:
		d.errorf(p+".mode", nil, "must be %s or %s, got %q", PromptReplace, PromptPrepend, pr.Mode)
	}
	if pr.SystemFile == "" {
		if !d.failed[p+".system_file"] {
			d.errorf(p+".system_file", nil, "a prompt needs a system_file")
		}
		return
	}
	data, ok := d.readFile(p+".system_file", pr.SystemFile, dir, MaxPromptBytes)
	if !ok {
		return
	}
	if !utf8.Valid(data) {
		d.errorf(p+".system_file", nil, "%s: not valid UTF-8", pr.SystemFile)
		return
	}
	sum := sha256.Sum256(data)
	pr.Text, pr.Hash = data, hex.EncodeToString(sum[:])
}

// readFile reads a file the config names (relative to dir first), at
// most limit bytes; errors name the key path.
func (d *decoder) readFile(p, name, dir string, limit int64) ([]byte, bool) {
	file, err := findFile(name, dir)
	if err != nil {
		d.errorf(p, nil, "%v", err)
		return nil, false
	}
	data, err := readLimited(file, limit)
	if err != nil {
		d.errorf(p, nil, "%s: %v", name, err)
		return nil, false
	}
	return data, true
}
