#!/usr/bin/env bash
# S3 for tests: a throw-away single-node Ceph cluster on 127.0.0.1 — one mon,
# one memstore OSD (objects in RAM), no mgr — and radosgw on 127.0.0.1:$FK_RGW_PORT.
# RGW honours conditional PUTs (If-Match / If-None-Match), which the S3 adapter needs.
#
# usage: rgw.sh start|stop|status|acquire|release   (see lib.sh for acquire/release)
# start and acquire print S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/rgw (wiped on start)
#      FK_RGW_PORT (7480) FK_RGW_MON_PORT (3300, msgr2) FK_RGW_MON_PORT_V1 (6789)
#      S3_ACCESS_KEY / S3_SECRET_KEY (test / testsecret) FK_RGW_MEMSTORE_BYTES (1 GiB)
# The OSD takes free ports from Ceph's default range 6800-7300 on 127.0.0.1.
# Every daemon daemonizes itself and writes $FK_STATE_DIR/rgw/run/<name>.pid.
set -euo pipefail
FK_SCRIPT=rgw
. "$(dirname "$0")/lib.sh"

PORT=${FK_RGW_PORT:-7480}
MON_PORT=${FK_RGW_MON_PORT:-3300}
MON_PORT_V1=${FK_RGW_MON_PORT_V1:-6789}
ACCESS_KEY=${S3_ACCESS_KEY:-test}
SECRET_KEY=${S3_SECRET_KEY:-testsecret}
MEMSTORE_BYTES=${FK_RGW_MEMSTORE_BYTES:-1073741824}
D=$FK_STATE_DIR/rgw
CONF=$D/ceph.conf
ENDPOINT=http://127.0.0.1:$PORT
# the three daemons, in start order; stop goes in reverse
DAEMONS=(mon.a osd.0 client.rgw.s3)
fk_safe_dir "$D"

print_env() {
  echo "S3_ENDPOINT=$ENDPOINT"
  echo "S3_REGION=us-east-1"
  echo "S3_ACCESS_KEY=$ACCESS_KEY"
  echo "S3_SECRET_KEY=$SECRET_KEY"
}

# A signed S3 call (curl's SigV4) with the test user's keys: answers only
# once radosgw serves and knows the user. Prints the HTTP status. (curl 7.88
# doesn't add x-amz-content-sha256 itself, and S3 refuses the signature
# without it: SignatureDoesNotMatch.)
s3_call() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X "$1" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" "$ENDPOINT/$2" || true
}

# Ready = the user can create and delete a bucket.
bucket_ready() {
  local b="fk-ready-$$-$RANDOM"
  [ "$(s3_call PUT "$b")" = 200 ] && [ "$(s3_call DELETE "$b")" = 204 ]
}

write_conf() {
  local fsid=$1
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]
public network = 127.0.0.0/8
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
# no cephx: a throw-away loopback cluster
auth cluster required = none
auth service required = none
auth client required = none
# radosgw's built-in defaults (ms_mon_client_mode = secure, cephx) hang for
# 300 s against a cluster with auth none ("get_initial_auth_request returned -13")
ms mon client mode = crc
ms client mode = crc
client mount timeout = 30
keyring = $D/keyring
run dir = $D/run
admin socket = $D/run/\$name.asok
pid file = $D/run/\$name.pid
log file = $D/log/\$name.log
log to stderr = false
err to stderr = false
crash dir = $D/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 1
mon data avail crit = 0
mon osd full ratio = .99
mon osd backfillfull ratio = .99
mon osd nearfull ratio = .99
osd failsafe full ratio = .995

[mon]
mon data = $D/mon.\$id
mon cluster log file = $D/log/cluster.log
# each osdmap change (OSD boot, every pool radosgw creates on first start)
# otherwise waits 1 s for paxos batching: 12 s start -> ~1.5 s
paxos propose interval = 0.05

[osd]
osd data = $D/osd.\$id
osd objectstore = memstore
memstore device bytes = $MEMSTORE_BYTES
osd op num shards = 1
osd op num threads per shard = 2

[client.rgw.s3]
auth client required = none
ms mon client mode = crc
rgw data = $D/rgw
rgw frontends = beast endpoint=127.0.0.1:$PORT
rgw dns name = localhost
rgw enable usage log = false
rgw thread pool size = 64
rgw init timeout = 60
log file = $D/log/rgw.log
EOF
}

running() { fk_pid_from "$D/run/mon.a.pid" "$CONF" >/dev/null; }

do_start() {
  fk_ensure_packages "${FK_PKGS_RGW[@]}"
  running && fk_die "a cluster in $D is already running; stop it first"
  local p
  for p in "$PORT" "$MON_PORT" "$MON_PORT_V1"; do
    fk_port_open "$p" && fk_die "127.0.0.1:$p is already in use"
  done
  rm -rf "$D"
  mkdir -p "$D"/{run,log,mon.a,osd.0,rgw,crash}
  # on any failure below: stop what already started, keep the logs
  trap 'rc=$?; if [ $rc -ne 0 ]; then fk_log "start failed (rc=$rc); logs in $D/log"; do_stop; fi' EXIT

  local t0 fsid osd_uuid osd_id i t_mon t_osd t_rgw
  t0=$(fk_now_ms)
  fsid=$(uuidgen)
  write_conf "$fsid"
  local C=(-c "$CONF") err=$D/log/start.err

  # monitor
  ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$D/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]" "$D/monmap" >/dev/null
  ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring" 2>>"$err"
  # 9>&- on every daemon: don't let it inherit (and hold forever) our flock
  ceph-mon "${C[@]}" -i a 2>>"$err" 9>&-
  t_mon=$(fk_elapsed "$t0")

  # OSD: memstore has nothing to format; objects live in the OSD's RAM
  osd_uuid=$(uuidgen)
  osd_id=$(ceph "${C[@]}" osd new "$osd_uuid" 2>>"$err")
  [ "$osd_id" = 0 ] || fk_die "expected OSD id 0, got '$osd_id'"
  ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$osd_uuid" >>"$err" 2>&1
  ceph-osd "${C[@]}" -i 0 2>>"$err" 9>&-
  for i in $(seq 1 240); do
    ceph "${C[@]}" osd stat 2>/dev/null | grep -q '1 up' && break
    sleep 0.1
  done
  ceph "${C[@]}" osd stat 2>/dev/null | grep -q '1 up' || fk_die "the OSD did not come up"
  t_osd=$(fk_elapsed "$t0")

  # radosgw creates its pools on first start, then daemonizes
  radosgw "${C[@]}" -n client.rgw.s3 2>>"$err" 9>&-
  for i in $(seq 1 600); do
    curl -s -o /dev/null --max-time 2 "$ENDPOINT/" && break
    sleep 0.1
  done
  curl -s -o /dev/null --max-time 2 "$ENDPOINT/" || fk_die "radosgw does not answer on $ENDPOINT"
  t_rgw=$(fk_elapsed "$t0")

  radosgw-admin "${C[@]}" user create --uid=test --display-name=test \
    --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" >/dev/null 2>>"$err"
  for i in $(seq 1 100); do bucket_ready && break; sleep 0.1; done
  bucket_ready || fk_die "the test user cannot create a bucket"
  trap - EXIT
  fk_log "mon ${t_mon}s, osd up ${t_osd}s, rgw answering ${t_rgw}s, bucket ready $(fk_elapsed "$t0")s"
}

do_stop() {
  local i
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    fk_stop_pidfile "$D/run/${DAEMONS[i]}.pid" "$CONF"
  done
}

# An S3 server that answers may still be starting: 30 s to serve the user.
user_ready() { fk_wait_until 30 0.1 bucket_ready; }
do_acquire() { fk_acquire_port "$PORT" user_ready "$ENDPOINT answers but user $ACCESS_KEY cannot create a bucket there"; }

usage() { echo "usage: $0 start|stop|status|acquire|release"; }

case "${1:-}" in
  status)
    for n in "${DAEMONS[@]}"; do echo "$n pid $(fk_pid_from "$D/run/$n.pid" "$CONF" || echo -)"; done
    bucket_ready && echo "S3 ready on $ENDPOINT" ;;
  *) fk_main rgw "$@" ;;
esac
