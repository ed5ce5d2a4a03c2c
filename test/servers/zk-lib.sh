# ZooKeeper 3.8 helpers shared by zk-standalone.sh and zk-ensemble.sh. Source me.
# The Debian package `zookeeper` ships the jars and starts nothing; its
# /etc/zookeeper/conf is an example we don't use: every server here gets a
# private zoo.cfg under $FK_STATE_DIR.

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# zookeeper.jar's manifest Class-Path pulls in netty/jetty/jackson/slf4j-api;
# slf4j-simple is the logging backend (to the node's zk.out). The secure
# client port needs Netty, and the manifest misses two of its jars.
FK_ZK_CP=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar
FK_ZK_HEAP=${FK_ZK_HEAP:-256m}
# checkIntervalMs: how often the server reaps empty containers and expired
# TTL nodes (default 60 s, and a JVM flag, not a zoo.cfg key); 1 s makes
# reaping testable. jute.maxbuffer 32 MiB: the server writes a session's
# closeSession txn with every ephemeral path of the session in it, without
# checking its size, but refuses to read a txn over jute.maxbuffer (1 MiB by
# default) back from its log: after the scale bench's session of 100,000
# locks (a 4.7 MB txn), a restarted node failed "Unreasonable length" and the
# ensemble lost a member for good. Seen here, 2026-12-06.
FK_ZK_JVM_FLAGS=${FK_ZK_JVM_FLAGS:--XX:+UseSerialGC -Xss512k -Djava.net.preferIPv4Stack=true -Dznode.container.checkIntervalMs=1000 -Djute.maxbuffer=33554432 -Dorg.slf4j.simpleLogger.defaultLogLevel=info -Dorg.slf4j.simpleLogger.showDateTime=true}

fk_zk_require() {
  fk_ensure_packages "${FK_PKGS_ZK[@]}"
  command -v java >/dev/null || fk_die "java not found (the zookeeper package should have pulled in default-jre)"
}

# The settings every test server shares (tests only: forceSync=no gives up
# durability on power loss, which no test exercises).
#   $1 = dataDir  $2 = client port  $3 = tickTime (ms)
fk_zk_common_cfg() {
  cat <<CFG
tickTime=$3
dataDir=$1
clientPort=$2
clientPortAddress=127.0.0.1
maxClientCnxns=0
# the AdminServer would take port 8080
admin.enableServer=false
4lw.commands.whitelist=*
forceSync=no
# TTL nodes (CreateMode persistent_with_ttl) need the extended zxid types
extendedTypesEnabled=true
# explicit bounds, so a test asking for a short session gets it whatever the
# tickTime (the defaults are 2 and 20 ticks)
minSessionTimeout=1000
maxSessionTimeout=60000
CFG
}

# The throwaway CA and server certificate (zk-certs.sh) in $FK_STATE_DIR/zk-tls;
# sets FK_ZK_TLS_DIR and prints nothing.
fk_zk_certs() {
  local line
  line=$(bash "$(dirname "${BASH_SOURCE[0]}")/zk-certs.sh" ensure) || fk_die "no certificates for the secure port"
  FK_ZK_TLS_DIR=$(dirname "${line#FK_ZK_TLS_CA=}")
}

# The secure client port (TLS, served by Netty, as is the plain port then):
# the server certificate of fk_zk_certs. A client certificate is optional
# (clientAuth=want): one that chains to the CA authenticates its session as
# the x509 id of its subject ('CN=...'); without one, clients authenticate
# with digest on top, or not at all.
#   $1 = secure port
fk_zk_tls_cfg() {
  local pass; pass=$(cat "$FK_ZK_TLS_DIR/password")
  cat <<CFG
secureClientPort=$1
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=$FK_ZK_TLS_DIR/keystore.p12
ssl.keyStore.password=$pass
ssl.keyStore.type=PKCS12
ssl.trustStore.location=$FK_ZK_TLS_DIR/truststore.p12
ssl.trustStore.password=$pass
ssl.trustStore.type=PKCS12
ssl.clientAuth=want
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
CFG
}

# Is the TLS port $1 up? (a TLS handshake completes; nothing about serving)
# Any failure is "not yet" (1): fk_wait_until gives up at once on a status of
# 2 or more, and timeout's 124 for a slow handshake is one. A cold JVM's first
# handshake, on a machine busy starting every other server, took over 2 s in
# a fresh machine's first run, which ended the start before a second attempt.
fk_zk_tls_up() {
  timeout 5 openssl s_client -connect "127.0.0.1:$1" -CAfile "$FK_ZK_TLS_DIR/ca.pem" -verify_return_error </dev/null >/dev/null 2>&1 || return 1
}

# Wait until the TLS port $1 completes a handshake; $2 = timeout in seconds.
fk_zk_wait_tls() {
  fk_wait_until "${2:-30}" 0.1 fk_zk_tls_up "$1" && return 0
  fk_log "127.0.0.1:$1 completes no TLS handshake after ${2:-30} s"
  return 1
}

# Send a four-letter word to 127.0.0.1:$1 and print the reply ('' if nothing answers).
fk_zk_4lw() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}

# standalone | leader | follower | '' (not serving: down, or no quorum).
# `ruok` answers imok before the server can serve; only srvr's Mode line means ready.
fk_zk_mode() { fk_zk_4lw "$1" srvr | sed -n 's/^Mode: //p'; }
fk_zk_serving() { [ -n "$(fk_zk_mode "$1")" ]; }

# Wait until port $1 serves (a Mode line); $2 = timeout in seconds.
fk_zk_wait_serving() { fk_wait_until "${2:-60}" 0.05 fk_zk_serving "$1"; }

# Start one server JVM in its own session (so a Ctrl-C aimed at the test
# run doesn't hit it); its PID goes to PIDFILE.  $1 = zoo.cfg  $2 = log  $3 = pidfile
# 9>&-: the caller holds its flock on fd 9; a daemon inheriting it would hold
# the lock for its whole life and every later start/stop would wait on it.
fk_zk_launch() {
  # shellcheck disable=SC2086 # FK_ZK_JVM_FLAGS is a list of flags
  setsid java -Xms"$FK_ZK_HEAP" -Xmx"$FK_ZK_HEAP" $FK_ZK_JVM_FLAGS -cp "$FK_ZK_CP" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$1" >"$2" 2>&1 </dev/null 9>&- &
  echo $! >"$3"
}
