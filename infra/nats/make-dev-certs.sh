#!/bin/sh
# Writes a throwaway CA and a NATS certificate for development into
# infra/nats-tls/ (or the directory given): ca.pem, server.pem,
# server-key.pem. The certificate serves both server and client
# authentication (extendedKeyUsage serverAuth, clientAuth): a node of the
# three-node cluster (cluster.conf) presents it to the clients and, when it
# dials another node's route, to that node, which verifies it. Its names:
# nats, localhost, 127.0.0.1 and ::1 (compose, the drill on loopback).
# For production, use certificates from your own CA (cert-manager on
# Kubernetes); docs/security.md "Rotating secrets" shows how to replace them.
set -eu
dir=${1:-$(dirname "$0")/../nats-tls}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj "/CN=graygate NATS CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=nats" -keyout server-key.pem -out server.csr 2>/dev/null
printf '%s\n' \
  'subjectAltName=DNS:nats,DNS:localhost,IP:127.0.0.1,IP:::1' \
  'keyUsage=critical,digitalSignature' \
  'extendedKeyUsage=serverAuth,clientAuth' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 \
  -extfile ext.cnf -out server.pem 2>/dev/null
rm -f server.csr ext.cnf ca.srl
chmod 600 ca-key.pem server-key.pem
echo "wrote $(pwd)/ca.pem server.pem server-key.pem (keep ca-key.pem offline)"
