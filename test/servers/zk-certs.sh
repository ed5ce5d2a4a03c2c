#!/usr/bin/env bash
# A throwaway CA and a server certificate for the test ZooKeepers' secure
# client ports, generated into the state dir on first use (never committed).
#
# usage: zk-certs.sh ensure     create them unless present and valid for another day
#                               (they last a year: a server running on them outlives no run);
#                               print FK_ZK_TLS_CA=<ca.pem> on stdout
#
# Files in $FK_STATE_DIR/zk-tls (FK_STATE_DIR default /tmp/fencekeeper-test):
#   ca.pem ca.key               the CA clients verify against
#   server.pem server.key       CN=localhost, subjectAltName DNS:localhost, IP:127.0.0.1
#   client.pem client.key       CN=fencekeeper-test-client: a client certificate, which the
#                               servers authenticate as the x509 id 'CN=fencekeeper-test-client'
#   keystore.p12 truststore.p12 what the servers' zoo.cfg points at (PKCS12)
#   password                    the stores' password (a throwaway: tests only)
#
# The scripts that start servers call fk_zk_certs (zk-lib.sh), which runs this
# under a machine-wide lock, so a standalone and an ensemble started in
# parallel share one CA.
set -euo pipefail
FK_SCRIPT=zk-certs
. "$(dirname "$0")/lib.sh"

T=$FK_STATE_DIR/zk-tls
fk_safe_dir "$T"

valid() {
  local f
  for f in ca.pem ca.key server.pem server.key client.pem client.key keystore.p12 truststore.p12 password; do [ -s "$T/$f" ] || return 1; done
  openssl x509 -in "$T/server.pem" -noout -checkend 86400 >/dev/null 2>&1 &&
    openssl x509 -in "$T/ca.pem" -noout -checkend 86400 >/dev/null 2>&1
}

generate() {
  command -v openssl >/dev/null || fk_ensure_packages openssl
  command -v keytool >/dev/null || fk_die "keytool not found (it comes with the JRE the zookeeper package pulls in)"
  local t0 tmp pass; t0=$(fk_now_ms)
  mkdir -p "$FK_STATE_DIR"
  tmp=$(mktemp -d "$FK_STATE_DIR/zk-tls.XXXXXX")
  pass=fencekeeper-test
  (
    cd "$tmp"
    umask 077
    echo "$pass" >password
    # ECDSA P-256: fast to make, and Java 17 and OpenSSL 3 both take it.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
      -subj "/CN=fencekeeper test CA" -keyout ca.key -out ca.pem \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
      -keyout server.key -out server.csr
    printf '%s\n' 'subjectAltName=DNS:localhost,IP:127.0.0.1' 'basicConstraints=CA:FALSE' \
      'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth,clientAuth' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
      -extfile server.ext -out server.pem
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=fencekeeper-test-client" \
      -keyout client.key -out client.csr
    printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature' 'extendedKeyUsage=clientAuth' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
      -extfile client.ext -out client.pem
    openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name server \
      -passout "pass:$pass" -out keystore.p12
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 \
      -storetype PKCS12 -storepass "$pass"
    rm -f server.csr server.ext client.csr client.ext ca.srl
  ) >"$tmp/gen.log" 2>&1 || { cat "$tmp/gen.log" >&2; rm -rf "$tmp"; fk_die "generating the certificates failed"; }
  rm -f "$tmp/gen.log"
  chmod 755 "$tmp"
  # the CA and the server certificate are public; the keys stay private
  chmod 644 "$tmp/ca.pem" "$tmp/server.pem" "$tmp/client.pem"
  rm -rf "$T"
  mv "$tmp" "$T"
  fk_log "generated a throwaway CA and server certificate in $T in $(fk_elapsed "$t0")s"
}

do_ensure() { valid || generate; }

case "${1:-}" in
  ensure) fk_locked "zk-certs-$(printf %s "$FK_STATE_DIR" | cksum | cut -d' ' -f1)" do_ensure; echo "FK_ZK_TLS_CA=$T/ca.pem" ;;
  *) echo "usage: $0 ensure" >&2; exit 2 ;;
esac
