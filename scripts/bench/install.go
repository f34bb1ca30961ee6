package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// tools finds wrk and nginx in PATH (or /usr/sbin for nginx), installing
// the Debian packages that carry the missing ones in one apt-get run.
func tools(ctx context.Context) (wrk, nginx string, err error) {
	find := func(name string, extra ...string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, p := range extra {
			if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
				return p
			}
		}
		return ""
	}
	wrk, nginx = find("wrk"), find("nginx", "/usr/sbin/nginx")
	var missing []string
	if wrk == "" {
		missing = append(missing, "wrk")
	}
	if nginx == "" {
		missing = append(missing, "nginx")
	}
	if len(missing) == 0 {
		return wrk, nginx, nil
	}
	logf("not found: %s; installing the Debian package(s)", strings.Join(missing, ", "))
	if err := aptInstall(ctx, missing...); err != nil {
		return "", "", err
	}
	wrk, nginx = find("wrk"), find("nginx", "/usr/sbin/nginx")
	if wrk == "" || nginx == "" {
		return "", "", fmt.Errorf("installed %s, but wrk or nginx is still not found", strings.Join(missing, " "))
	}
	return wrk, nginx, nil
}

// policyRC is Debian's hook that lets invoke-rc.d start services from
// maintainer scripts; exit status 101 forbids it.
const policyRC = "/usr/sbin/policy-rc.d"

// aptInstall installs Debian packages without prompts. While it runs, a
// temporary policy-rc.d (when the machine has none) stops the packages from
// starting system services: installing nginx must not leave a system nginx
// listening on port 80, the benchmark runs its own.
func aptInstall(ctx context.Context, pkgs ...string) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("cannot install %s: no apt-get here; install it by hand", strings.Join(pkgs, " "))
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("cannot install %s: not root; run `sudo apt-get install %s` first", strings.Join(pkgs, " "), strings.Join(pkgs, " "))
	}
	if _, err := os.Stat(policyRC); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(policyRC, []byte("#!/bin/sh\n# temporary, written by graygate scripts/bench during apt-get install\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policyRC)
		}
	}
	for _, args := range [][]string{
		{"update", "-q"},
		append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...),
	} {
		logf("running apt-get %s", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	return nil
}
