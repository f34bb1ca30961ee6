package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
)

// sealer seals operators' admin tokens for the session store with
// AES-256-GCM under collector.console.session_key_file (SPEC §8 rev. 4): a
// key of its own, never derived from the API token. Each sealing draws a
// random 96-bit nonce; the row's id hash and operator are the additional
// data, so a sealed token moved to another row, or to another operator,
// does not open.
type sealer struct {
	aead cipher.AEAD
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("session key: want 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// additional is the additional data of a row's sealed token.
func additional(idHash []byte, operator string) []byte {
	return append(append([]byte("graygate-console-token/v1\x00"), idHash...), operator...)
}

// seal returns nonce || ciphertext of token for the row (idHash, operator).
func (s *sealer) seal(token string, idHash []byte, operator string) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(token)+s.aead.Overhead())
	rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, []byte(token), additional(idHash, operator))
}

// open returns the token sealed in sealed for the row (idHash, operator).
func (s *sealer) open(sealed, idHash []byte, operator string) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return "", errUnsealed
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], additional(idHash, operator))
	if err != nil {
		return "", errUnsealed
	}
	return string(plain), nil
}
