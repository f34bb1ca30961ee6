package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/graygate/graygate/schemas/config"
)

// TLSConfig returns the client TLS configuration of an https:// upstream
// (SPEC §3): TLS 1.2 or later, the system roots or the configured CA,
// an optional client certificate, server_name (default: the URL's host)
// and insecure_skip_verify. The PEM contents were read and checked at
// config load.
func TLSConfig(host string, t config.UpstreamTLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         host,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit, warned-about config key
	}
	if t.ServerName != "" {
		tc.ServerName = t.ServerName
	}
	if len(t.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CAPEM) {
			return nil, errors.New("tls.ca_file holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if len(t.CertPEM) > 0 {
		cert, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
