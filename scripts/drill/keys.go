package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// signers are the drill's rollout signing keys (SPEC §7 rev. 4): the
// gateways sign operators' and config events with one, the analyzers
// their events and heartbeats with the other. Made fresh at each run.
type signers struct {
	gatewayPub, gatewaySeed   string // public key, seed file
	analyzerPub, analyzerSeed string
}

// makeSigners writes a user nkey seed per signer under dir.
func makeSigners(dir string) (signers, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return signers{}, err
	}
	one := func(name string) (string, string, error) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", "", err
		}
		seed, err := kp.Seed()
		if err != nil {
			return "", "", err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return "", "", err
		}
		file := filepath.Join(dir, name+".nk")
		if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
			return "", "", err
		}
		return pub, file, nil
	}
	var s signers
	var err error
	if s.gatewayPub, s.gatewaySeed, err = one("gateway"); err != nil {
		return s, fmt.Errorf("signing key: %w", err)
	}
	if s.analyzerPub, s.analyzerSeed, err = one("analyzer"); err != nil {
		return s, fmt.Errorf("signing key: %w", err)
	}
	return s, nil
}
