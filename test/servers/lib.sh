# Shared helpers for the server scripts in this folder. Source me; don't run me.
#
# Conventions every script follows:
#   - stdout carries only `NAME=value` lines a caller may eval or parse (the
#     global setup does); everything for humans goes to stderr.
#   - processes are found by the PID file their start wrote, and a PID is only
#     signalled after /proc/PID/cmdline shows it is the process we started
#     (PIDs get reused), never by name.
#   - `start`/`stop` are for a developer at a shell. `acquire`/`release` are
#     for test runs: several vitest runs may share one server (other engineers
#     in the same tree, or a developer's manual server). acquire registers the
#     caller's PID under users/ and starts the server only if nothing answers;
#     release unregisters it and stops the server only when acquire started it
#     and no live user remains.

FK_STATE_DIR=${FK_STATE_DIR:-/tmp/fencekeeper-test}

fk_log() { printf '%s: %s\n' "${FK_SCRIPT:-${0##*/}}" "$*" >&2; }
fk_die() { fk_log "$*"; exit 1; }

# Milliseconds since the epoch, and "1.23" seconds since a start mark.
fk_now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
fk_elapsed() { local ms=$(( $(fk_now_ms) - $1 )); printf '%d.%02d' $((ms / 1000)) $(((ms % 1000) / 10)); }

# fk_wait_until SECONDS STEP CMD...: run CMD every STEP seconds until it
# succeeds (0), for at most SECONDS (then 1). A CMD that answers 2 or more
# has seen that waiting is pointless (the process it waits for died): that
# status at once.
fk_wait_until() {
  local deadline=$(( $(fk_now_ms) + $1 * 1000 )) step=$2 rc
  shift 2
  while [ "$(fk_now_ms)" -lt "$deadline" ]; do
    if "$@"; then return 0; else rc=$?; fi
    [ "$rc" -lt 2 ] || return "$rc"
    sleep "$step"
  done
  return 1
}

# Refuse to rm -rf anything that is not clearly a private state directory.
fk_safe_dir() {
  case "$1" in
    ""|/|/tmp|/tmp/|/root|/home|/var|/usr|/etc) fk_die "refusing to use state dir '$1'";;
  esac
}

# Run "$@" holding an exclusive lock named $1 (scripts started in parallel
# by the global setup, or by two test runs, must not race on start/stop).
# Locks are machine-wide and named after the server's port, not kept in the
# state dir: two runs with different FK_STATE_DIRs but the same ports would
# otherwise both see a free port and race to bind it. (Give a private
# FK_STATE_DIR private ports too: users and PID files live in the state dir.)
# The lock is fd 9: every daemon started under it must be launched with 9>&-.
FK_LOCK_DIR=${FK_LOCK_DIR:-/tmp/fencekeeper-locks}
fk_locked() {
  local name=$1; shift
  mkdir -p "$FK_LOCK_DIR"
  (
    flock -w 600 9 || fk_die "timed out waiting for lock $name"
    "$@"
  ) 9>"$FK_LOCK_DIR/$name.lock"
}

# --- Debian packages ------------------------------------------------------

fk_pkg_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# Install whichever of the named packages are missing: one `apt-get update`
# and one `apt-get install` for all of them, so a warm machine pays nothing.
fk_ensure_packages() {
  local missing=() p
  for p in "$@"; do fk_pkg_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || fk_die "missing Debian packages (${missing[*]}) and not root to install them"
  fk_locked apt _fk_apt_install "${missing[@]}"
}
_fk_apt_install() {
  local missing=() p t0
  # another script may have installed them while we waited for the lock
  for p in "$@"; do fk_pkg_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  t0=$(fk_now_ms)
  fk_log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$FK_STATE_DIR"
  local log=$FK_STATE_DIR/apt.log
  if ! { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
         apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -30 "$log" >&2
    fk_die "apt-get failed installing ${missing[*]} (full log: $log)"
  fi
  fk_log "installed ${missing[*]} in $(fk_elapsed "$t0")s"
}

# Debian packages each server needs (run-tests.sh installs the union at once).
FK_PKGS_ZK=(zookeeper openssl)
FK_PKGS_RGW=(ceph-mon ceph-osd radosgw curl uuid-runtime)
FK_PKGS_PG=(postgresql)

# --- processes --------------------------------------------------------------

# Alive = exists and is not a zombie. Daemons we start are re-parented to
# PID 1, which may reap them late, and `kill -0` succeeds on a zombie.
fk_alive() {
  local state
  [ -r "/proc/$1/stat" ] || return 1
  # field 3 of /proc/PID/stat, after the parenthesised command name
  state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# True when PID is alive and its command line contains MARKER (our config path).
fk_is_ours() {
  fk_alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# PID from PIDFILE if that process is alive and ours (MARKER), else nothing.
fk_pid_from() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  fk_is_ours "$pid" "$2" && echo "$pid"
}

# Wait until PID is gone (or a zombie); $2 = timeout in tenths of a second.
fk_wait_gone() {
  local i
  for ((i = 0; i < ${2:-100}; i++)); do fk_alive "$1" || return 0; sleep 0.1; done
  return 1
}

# Stop the process in PIDFILE if it is ours (MARKER): SIGTERM (or $3=KILL),
# escalate to SIGKILL after 10 s, confirm it is gone, remove the PID file.
fk_stop_pidfile() {
  local pidfile=$1 marker=$2 sig=${3:-TERM} pid
  pid=$(fk_pid_from "$pidfile" "$marker") || { rm -f "$pidfile"; return 0; }
  kill "-$sig" "$pid" 2>/dev/null || true
  if ! fk_wait_gone "$pid" 100; then
    fk_log "pid $pid ignored SIG$sig for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    fk_wait_gone "$pid" 50 || fk_die "pid $pid survived SIGKILL"
  fi
  rm -f "$pidfile"
  fk_log "stopped pid $pid"
}

# Is something accepting TCP connections on 127.0.0.1:PORT?
fk_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- shared-server bookkeeping (acquire/release) ----------------------------

# $1 = server dir. The user is the PID given in FK_USER_PID (the vitest main
# process), else our parent shell.
fk_user_pid() { echo "${FK_USER_PID:-$PPID}"; }
fk_add_user() { mkdir -p "$1/users"; : >"$1/users/$(fk_user_pid)"; }
fk_remove_user() { rm -f "$1/users/$(fk_user_pid)"; }
# Forget users whose process has died (a run killed before its teardown),
# then count the rest.
fk_live_users() {
  local f n=0
  [ -d "$1/users" ] || { echo 0; return; }
  for f in "$1/users"/*; do
    [ -e "$f" ] || continue
    if fk_alive "${f##*/}"; then n=$((n + 1)); else rm -f "$f"; fi
  done
  echo "$n"
}

# release STATE_DIR STOP_FN: drop the caller from the server's users; if this
# run started the server ("acquired") and nobody else uses it, stop it.
fk_release() {
  local dir=$1 stop=$2
  [ -d "$dir" ] || return 0
  fk_remove_user "$dir"
  if [ -e "$dir/acquired" ] && [ "$(fk_live_users "$dir")" -eq 0 ]; then
    "$stop"
    rm -f "$dir/acquired"
  fi
}

# acquire for a server on one port ($1): whatever answers there is reused
# once READY ($2, a command) succeeds, else exit with MESSAGE ($3); with
# nothing there, start one (do_start) and mark it acquired.
fk_acquire_port() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  if fk_port_open "$1"; then
    "$2" || fk_die "$3"
    fk_log "reusing the server on 127.0.0.1:$1"
  else
    do_start
    : >"$D/acquired"
  fi
  fk_add_user "$D"
}

# The running script's absolute path. A script whose nodes the tests drive
# names the variable that carries it in FK_CTL_NAME (FK_ETCD_CTL, ...):
# fk_print_env prints it after the script's own print_env.
FK_SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
fk_print_env() {
  print_env
  if [ -n "${FK_CTL_NAME:-}" ]; then echo "$FK_CTL_NAME=$FK_SELF"; fi
}

# The commands every server script has, each under the machine-wide lock $1:
# start, stop, acquire, release (see the top of this file); anything else
# prints the script's usage. The script defines D, do_start, do_stop,
# do_acquire, print_env and usage.
fk_main() {
  local lock=$1; shift
  case "${1:-}" in
    start)   fk_locked "$lock" do_start; fk_print_env ;;
    stop)    fk_locked "$lock" do_stop; rm -f "$D/acquired" ;;
    acquire) fk_locked "$lock" do_acquire; fk_print_env ;;
    release) fk_locked "$lock" fk_release "$D" do_stop ;;
    *) usage >&2; exit 2 ;;
  esac
}

# Debian packages of the Redis and etcd servers (redis.sh, etcd.sh). Listed
# apart from the ones above: redis-tools brings redis-cli, etcd-client etcdctl.
FK_PKGS_REDIS=(redis-server redis-tools)
FK_PKGS_ETCD=(etcd-server etcd-client)
