# lib.sh: what the session recovery tests share (bash library, sourced after set -euo pipefail).
# Each test runs real I/O against a private tgtd that it kills (SIGKILL, as in a crash) and
# starts again with the same configuration and backing files (tests/harness/tgt.sh), and checks
# that the I/O never failed and the data is intact.
#
#   . "$(dirname "$0")/lib.sh"
#   recovery_setup                # $WORK; tgtd started; logs shown at exit on failure
#   tgt_target 1 IQN; tgt_lun 1 1 64M
#   recovery_mount LOG URL [options...]      # `iser-connect mount -f` on $MNT, info log in LOG
#   fio ... & recovery_restarts $! 10 LOG    # restarts while fio runs, each one recovered
#   recovery_fio_check FIO_JSON
#   recovery_unmount
#
# ISER_CONNECT is the iser-connect binary (CTest passes it). Missing tools fail the test.

. "$(dirname "${BASH_SOURCE[0]}")/../fuse/lib.sh"

RECOVERY_LOGS=()

recovery_setup() {
  requires timeout python3 fio cmp
  temp_dir WORK recovery
  # The test's own session table: tests that run at once never see each other's mounts (a mount
  # of a target another one holds would be "session exists").
  export ISER_CONNECT_RUNTIME_DIR=$WORK/run
  mkdir "$ISER_CONNECT_RUNTIME_DIR"
  tgt_start
  RECOVERY_LOGS+=("$TGT_DIR/tgtd.log")
  cleanup_push recovery_show_logs
}

# On failure, the end of every log the test collected (the mount's, nbdkit's, tgtd's).
recovery_show_logs() {
  [ "${CLEANUP_STATUS:-0}" -ne 0 ] || return 0
  local log
  for log in "${RECOVERY_LOGS[@]}"; do
    [ -s "$log" ] || continue
    echo "--- $log (last 30 lines) ---" >&2
    tail -30 "$log" >&2
  done
}

# recovery_mount LOG URL [options...]: `iser-connect mount -f` on $MNT (made here) in the
# background, info logging (the recovery messages) in LOG; MOUNT_PID is the mount process.
recovery_mount() {
  local log=$1 url=$2
  shift 2
  [ -n "${ISER_CONNECT:-}" ] && [ -x "$ISER_CONNECT" ] ||
    fail "ISER_CONNECT must name the iser-connect binary"
  [ -c /dev/fuse ] || fail "/dev/fuse is missing"
  requires fusermount3
  MNT=$WORK/mnt
  mkdir -p "$MNT"
  RECOVERY_LOGS+=("$log")
  cleanup_push fuse_cleanup
  "$ISER_CONNECT" mount --log-level info "$url" "$MNT" -f "$@" 2>"$log" &
  MOUNT_PID=$!
  FUSE_MOUNTS+=("$MNT")
  FUSE_PIDS+=("$MOUNT_PID")
  wait_for --pid "$MOUNT_PID" 30 fuse_mounted "$MNT" fuse.iser-connect ||
    fail "mount of $url failed: $(cat "$log")"
}

# Unmounts $MNT; the mount process must exit 0.
recovery_unmount() {
  fusermount3 -u "$MNT" || fail "fusermount3 -u $MNT"
  wait_for 30 exited "$MOUNT_PID" || fail "the mount process is still running 30 s after unmount"
  wait "$MOUNT_PID" || fail "the mount exited non-zero"
}

# recovery_count LOG: how many recoveries LOG reports.
recovery_count() {
  grep -c "recovered the session to .* after" "$1" || true
}

# recovery_logged LOG COUNT: LOG reports more than COUNT recoveries (a command for wait_for).
recovery_logged() {
  [ "$(recovery_count "$1")" -gt "$2" ]
}

# recovery_background PID: the workload PID started in the background is killed at exit if it
# still runs (a failed test must not leave it behind).
recovery_background() {
  cleanup_push "kill $1 2>/dev/null || true"
}

# recovery_sleep MIN_MS MAX_MS: sleeps a random time in [MIN_MS, MAX_MS) and prints it (seconds).
recovery_sleep() {
  local ms=$(($1 + RANDOM % ($2 - $1))) s
  s=$((ms / 1000)).$(printf %03d $((ms % 1000)))
  sleep "$s"
  echo "$s"
}

# recovery_replayed LOG: how many commands LOG reports replayed, over all recoveries.
recovery_replayed() {
  sed -n 's/.*, \([0-9]*\) commands* replayed.*/\1/p' "$1" | awk '{n += $1} END {print n + 0}'
}

# recovery_restarts PID COUNT LOG: COUNT times, while process PID (the workload) runs: the
# target stays up a random 0.2-2 s, hangs (SIGSTOP) a random 0-0.5 s so that commands are in
# flight, is killed, stays down a random 0.5-2 s and is started again; then LOG must report one
# more recovery within 20 s. Fails if the workload ends first: every restart must meet I/O.
recovery_restarts() {
  local pid=$1 count=$2 log=$3 i up hang down t0 before
  before=$(recovery_count "$log")
  for ((i = 1; i <= count; i++)); do
    up=$(recovery_sleep 200 2000)
    exited "$pid" && fail "the workload ended after $((i - 1)) of $count restarts"
    kill -STOP "$TGT_PID"
    hang=$(recovery_sleep 0 500)
    tgt_kill
    t0=$(date +%s%N)
    down=$(recovery_sleep 500 2000)
    tgt_restart
    wait_for 20 recovery_logged "$log" $((before + i - 1)) ||
      fail "restart $i: no recovery logged within 20 s of the target's return"
    echo "restart $i: up ${up} s, hung ${hang} s, down ${down} s, recovered $((($(date +%s%N) - t0) / 1000000)) ms after the kill"
  done
  exited "$pid" && fail "the workload ended before the last recovery"
  return 0
}

# recovery_fio_check JSON: fio's JSON report shows no error in any job, and each job's verify
# phase read back as many bytes as it wrote.
recovery_fio_check() {
  python3 - "$1" <<'PY' || fail "fio report: $(cat "$1")"
import json, sys
text = open(sys.argv[1]).read()
# fio writes its warnings (e.g. about several writers) into the file before the JSON.
report = json.loads(text[text.find("{"):])
for job in report["jobs"]:
    name, written, read = job["jobname"], job["write"]["io_bytes"], job["read"]["io_bytes"]
    print(f"fio job {name}: error {job['error']}, wrote {written} bytes, verified {read} bytes")
    assert job["error"] == 0, f"{name}: error {job['error']}"
    assert written > 0 and read == written, f"{name}: wrote {written} bytes, read back {read}"
PY
}
