# ZooKeeper 3.8 helpers shared by zk-standalone.sh and zk-ensemble.sh. Source me.
# The Debian package `zookeeper` ships the jars and starts nothing; its
# /etc/zookeeper/conf is an example we don't use: every server here gets a
# private zoo.cfg under $FK_STATE_DIR.

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# zookeeper.jar's manifest Class-Path pulls in netty/jetty/jackson/slf4j-api;
# slf4j-simple is the logging backend (to the node's zk.out).
FK_ZK_CP=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
FK_ZK_HEAP=${FK_ZK_HEAP:-256m}
# checkIntervalMs: how often the server reaps empty containers and expired
# TTL nodes (default 60 s, and a JVM flag, not a zoo.cfg key); 1 s makes
# reaping testable.
FK_ZK_JVM_FLAGS=${FK_ZK_JVM_FLAGS:--XX:+UseSerialGC -Xss512k -Djava.net.preferIPv4Stack=true -Dznode.container.checkIntervalMs=1000 -Dorg.slf4j.simpleLogger.defaultLogLevel=info -Dorg.slf4j.simpleLogger.showDateTime=true}

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

# Send a four-letter word to 127.0.0.1:$1 and print the reply ('' if nothing answers).
fk_zk_4lw() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' _ "$1" "$2" 2>/dev/null || true
}

# standalone | leader | follower | '' (not serving: down, or no quorum).
# `ruok` answers imok before the server can serve; only srvr's Mode line means ready.
fk_zk_mode() { fk_zk_4lw "$1" srvr | sed -n 's/^Mode: //p'; }

# Wait until port $1 serves (a Mode line); $2 = timeout in seconds.
fk_zk_wait_serving() {
  local deadline=$(( $(fk_now_ms) + ${2:-60} * 1000 ))
  while [ "$(fk_now_ms)" -lt "$deadline" ]; do
    [ -n "$(fk_zk_mode "$1")" ] && return 0
    sleep 0.05
  done
  return 1
}

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
