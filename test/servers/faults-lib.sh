# Taking turns at injecting faults into a shared server. Source me after lib.sh.
#
# Several test files (in parallel vitest workers, or in two test runs) may
# share one set of servers. A file that kills, pauses or wipes nodes holds
# the set's fault turn for its whole run, so that no other fault test breaks
# its nodes under it. A file that only uses the servers but cannot bear a
# node going away under it (one that counts on all five Redlock nodes, or on
# an etcd leader staying put) takes the turn too.
#
# The turn is a file naming its holder's PID (FK_USER_PID: the vitest worker),
# taken and given back under a flock, machine-wide like the start locks. A
# holder that died (a killed run) loses the turn to the next taker.

# fk_hold_faults NAME SECONDS: wait until we hold turn NAME; exit 1 on timeout.
fk_hold_faults() {
  local name=$1 deadline=$(( $(fk_now_ms) + ${2:-600} * 1000 )) holder
  mkdir -p "$FK_LOCK_DIR"
  while :; do
    if fk_locked "$name-turn" _fk_take_turn "$FK_LOCK_DIR/$name.turn"; then return 0; fi
    if [ "$(fk_now_ms)" -ge "$deadline" ]; then
      holder=$(cat "$FK_LOCK_DIR/$name.turn" 2>/dev/null || true)
      fk_die "the fault turn $name stayed with pid ${holder:-?} for ${2:-600} s"
    fi
    sleep 0.2
  done
}
_fk_take_turn() {
  local holder me
  me=$(fk_user_pid)
  holder=$(cat "$1" 2>/dev/null || true)
  if [ -n "$holder" ] && [ "$holder" != "$me" ] && fk_alive "$holder"; then return 1; fi
  echo "$me" >"$1"
}

# fk_release_faults NAME: give turn NAME back if we hold it.
fk_release_faults() { fk_locked "$1-turn" _fk_give_turn "$FK_LOCK_DIR/$1.turn"; }
_fk_give_turn() { if [ "$(cat "$1" 2>/dev/null || true)" = "$(fk_user_pid)" ]; then rm -f "$1"; fi; }

# The one-letter state of PID (R, S, T, Z...), '' when gone.
fk_proc_state() { sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null || true; }

# SIGSTOP / SIGCONT PID and return once the kernel shows it stopped / running
# (signal delivery is asynchronous: a caller checking right after the kill
# could still see it running).
fk_pause_pid() {
  local i
  kill -STOP "$1"
  for ((i = 0; i < 100; i++)); do [ "$(fk_proc_state "$1")" = T ] && return 0; sleep 0.01; done
  fk_die "pid $1 not stopped 1 s after SIGSTOP"
}
fk_resume_pid() {
  local i
  kill -CONT "$1"
  for ((i = 0; i < 100; i++)); do [ "$(fk_proc_state "$1")" != T ] && return 0; sleep 0.01; done
  fk_die "pid $1 still stopped 1 s after SIGCONT"
}
