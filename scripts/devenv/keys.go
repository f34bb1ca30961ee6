package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// signingKeys makes, once, the development signing keys of SPEC §7 rev. 4
// under .data/keys (the gateway's, which signs admin and config rollout
// events, and the analyzer's, which signs its rollout events and
// heartbeats), and returns the variables graygate.yaml of this directory
// reads them from: GRAYGATE_DEV_<NAME>_NKEY (the public key, listed in
// nats.rollout_signers) and GRAYGATE_DEV_<NAME>_SEED_FILE. The seeds are
// development keys of this checkout: never committed, never shipped.
func signingKeys(l layout) ([][2]string, error) {
	dir := filepath.Join(l.data, "keys")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var vars [][2]string
	for _, name := range []string{"gateway", "analyzer"} {
		file := filepath.Join(dir, name+".nk")
		pub, err := signingKey(file)
		if err != nil {
			return nil, fmt.Errorf("signing key %s: %w", l.rel(file), err)
		}
		upper := map[string]string{"gateway": "GATEWAY", "analyzer": "ANALYZER"}[name]
		vars = append(vars, [2]string{"GRAYGATE_DEV_" + upper + "_NKEY", pub}, [2]string{"GRAYGATE_DEV_" + upper + "_SEED_FILE", file})
	}
	return vars, nil
}

// signingKey returns the public key of the user nkey seed in file, making
// the seed first when the file does not exist.
func signingKey(file string) (string, error) {
	seed, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		if seed, err = kp.Seed(); err != nil {
			return "", err
		}
		if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
			return "", err
		}
		logf("made the development signing key %s", filepath.Base(file))
	} else if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return "", fmt.Errorf("not an nkey seed (remove it and run up again): %w", err)
	}
	return kp.PublicKey()
}

// keysIn makes the gateway's and the analyzer's signing keys in dir (for
// infra/: compose mounts infra/signing-keys, Kubernetes takes them as a
// Secret) and prints their public keys as export lines, the values of
// nats.rollout_signers (GRAYGATE_GATEWAY_NKEY, GRAYGATE_ANALYZER_NKEY).
// Existing seeds are kept.
func keysIn(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{"gateway", "analyzer"} {
		file := filepath.Join(dir, name+".nk")
		pub, err := signingKey(file)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		fmt.Printf("export GRAYGATE_%s_NKEY=%s\n", map[string]string{"gateway": "GATEWAY", "analyzer": "ANALYZER"}[name], pub)
	}
	logf("seeds in %s (keep them secret; never commit them)", dir)
	return nil
}
