#!/bin/sh
# Writes a throwaway CA and a NATS server certificate for the compose
# setup into infra/nats-tls/ (ca.pem, server.pem, server-key.pem). For
# production, use certificates from your own CA (cert-manager on
# Kubernetes); docs/security.md "Rotating secrets" shows how to replace them.
set -eu
dir=$(dirname "$0")/../nats-tls
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj "/CN=graygate NATS CA" -keyout ca-key.pem -out ca.pem
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=nats" -keyout server-key.pem -out server.csr
printf 'subjectAltName=DNS:nats,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 \
  -extfile ext.cnf -out server.pem
rm -f server.csr ext.cnf ca.srl
chmod 600 ca-key.pem server-key.pem
echo "wrote $(pwd)/ca.pem server.pem server-key.pem (keep ca-key.pem offline)"
