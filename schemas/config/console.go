package config

import (
	"encoding/hex"
	"net/netip"
	"net/url"
	"strings"
)

// SessionKeyBytes is the size of collector.console.session_key_file's key
// (SPEC §8 rev. 4): an AES-256 key.
const SessionKeyBytes = 32

// maxTrustedProxies caps collector.console.trusted_proxies.
const maxTrustedProxies = 256

// validateConsole checks collector.console (SPEC §8 rev. 4): admin_url an
// http(s) base URL; trusted_proxies IPs or CIDRs; and, for the collector,
// the session key file: exactly 32 bytes (raw, or 64 hex digits with an
// optional final newline), a regular file that neither group nor others
// may read. Messages name the key, never the key's bytes.
func (d *decoder) validateConsole(c *Console, dir string) {
	const p = "collector.console"
	if c.AdminURL != "" && !d.failed[p+".admin_url"] {
		if base, msg := adminBase(c.AdminURL); msg != "" {
			d.errorf(p+".admin_url", nil, "%s", msg)
		} else {
			c.AdminURL = base
		}
	}
	if len(c.TrustedProxies) > maxTrustedProxies {
		d.errorf(p+".trusted_proxies", nil, "at most %d entries, got %d", maxTrustedProxies, len(c.TrustedProxies))
	} else {
		c.Proxies = nil
		for i, s := range c.TrustedProxies {
			pre, ok := parseProxy(s)
			if !ok {
				d.errorf(indexPath(p+".trusted_proxies", i), nil, "%q is not an IP address or a CIDR (10.0.0.0/8, ::1)", clipName(s))
				continue
			}
			c.Proxies = append(c.Proxies, pre)
		}
	}
	if c.SessionKeyFile != "" && d.svc.collector() && !d.failed[p+".session_key_file"] {
		if key, ok := d.sessionKey(p+".session_key_file", c.SessionKeyFile, dir); ok {
			c.SessionKey = Secret(key)
		}
	}
}

// adminBase returns raw as a base URL without a final slash, or why it is
// not one.
func adminBase(raw string) (string, string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", "not a URL: " + err.Error()
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "want an http:// or https:// base URL of the gateway's admin listener, got scheme " + quoteShort(u.Scheme)
	case u.Host == "":
		return "", "want http://host:port or https://host:port (no host in " + quoteShort(raw) + ")"
	case u.User != nil:
		return "", "credentials do not belong in the URL: each operator's own admin token is sent"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", "a base URL has no query or fragment"
	}
	return strings.TrimRight(u.String(), "/"), ""
}

func quoteShort(s string) string { return `"` + clipName(s) + `"` }

// parseProxy reads an IP address (a one-address prefix) or a CIDR.
func parseProxy(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		return pre.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true
}

// sessionKey reads the session key file (key p): 32 raw bytes, or 64 hex
// digits and an optional final newline. A file group or others may read
// or write is read, with a warning to chmod it (refusing it would stop
// the collector over a file mode, as no other secret file does).
func (d *decoder) sessionKey(p, name, dir string) ([]byte, bool) {
	file, err := findFile(name, dir)
	if err != nil {
		d.errorf(p, nil, "%v", err)
		return nil, false
	}
	data, err := readLimited(file, 2*SessionKeyBytes+2)
	if err != nil {
		d.errorf(p, nil, "%s: %v", name, err)
		return nil, false
	}
	if info, err := statMode(file); err != nil {
		d.errorf(p, nil, "%s: %v", name, err)
		return nil, false
	} else if info&0o077 != 0 {
		d.warnf(p, nil, "%s is readable or writable by group or others (mode %04o): chmod 600 it", name, info&0o777)
	}
	switch {
	case len(data) == SessionKeyBytes:
		return data, true
	case len(data) == 2*SessionKeyBytes || (len(data) == 2*SessionKeyBytes+1 && data[len(data)-1] == '\n'):
		key, err := hex.DecodeString(string(data[:2*SessionKeyBytes]))
		if err == nil {
			return key, true
		}
	}
	d.errorf(p, nil, "%s must hold exactly %d bytes (head -c %d /dev/urandom > %s) or %d hex digits; it holds %d bytes",
		name, SessionKeyBytes, SessionKeyBytes, name, 2*SessionKeyBytes, len(data))
	return nil, false
}
