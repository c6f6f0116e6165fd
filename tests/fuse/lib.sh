# lib.sh: shared steps of the FUSE frontend tests (bash library, sourced after set -euo pipefail).
#
#   . "$(dirname "$0")/lib.sh"
#   fuse_setup                    # tgtd fixture; unmounts and stops everything at exit
#   tgt_target 1 iqn.2026-11.test:disk; tgt_lun 1 1 64M
#   fuse_mount "$(fuse_url 1)" "$MNT" [mount options...]   # detached, pid in $FUSE_PID
#   fuse_mount_foreground LOG URL "$MNT" [options...]      # -f in the background, same
#   ...
#   fuse_unmount "$MNT"           # fusermount3 -u, waits for the process to end
#
# ISER_FUSE_MOUNT is the iser-fuse-mount binary (CTest passes it). Every missing tool is a failure,
# not a skip (requires, tests/harness/functions.sh): these tests exist to run.

. "$(dirname "${BASH_SOURCE[0]}")/../harness/tgt.sh"

FUSE_MOUNTS=()
FUSE_PIDS=()

# Unmounts what the test mounted and kills what serves it, before tgtd stops.
fuse_cleanup() {
  local m p
  for m in "${FUSE_MOUNTS[@]}"; do
    if fuse_mounted "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m" || true; fi
  done
  for p in "${FUSE_PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
  done
}

fuse_setup() {
  [ -n "${ISER_FUSE_MOUNT:-}" ] && [ -x "$ISER_FUSE_MOUNT" ] ||
    fail "ISER_FUSE_MOUNT must name the iser-fuse-mount binary"
  [ -c /dev/fuse ] || fail "/dev/fuse is missing"
  requires fusermount3 timeout python3
  FUSE_MOUNT_COMMAND=("$ISER_FUSE_MOUNT")
  temp_dir FUSE_DIR fuse-test
  MNT=$FUSE_DIR/mnt
  mkdir "$MNT"
  tgt_start
  # Every mount registers in the session table (docs/sessions.md): in a runtime directory of the
  # test's own, so that tests run in parallel and never touch the machine's /run/iser-connect.d.
  export ISER_CONNECT_RUNTIME_DIR=$FUSE_DIR/run
  mkdir -m 0755 "$ISER_CONNECT_RUNTIME_DIR"
  cleanup_push fuse_cleanup
}

fuse_url() {  # fuse_url TID [LUN]: iser:// when the target is tgtd's iSER target (TGT_LLD=iser)
  local scheme=iscsi
  [ "${TGT_LLD:-iscsi}" = iser ] && scheme=iser
  echo "$scheme://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t$1${2:+/$2}"
}

# fuse_mount URL MOUNTPOINT [options...]: mounts detached with FUSE_MOUNT_COMMAND (default
# $ISER_FUSE_MOUNT; a test of the CLI sets ("$ISER_CONNECT" mount)); FUSE_PID is the serving
# process.
fuse_mount() {
  local url=$1 mnt=$2
  shift 2
  local pidfile=$FUSE_DIR/pid.$RANDOM
  FUSE_MOUNTS+=("$mnt")
  timeout 60 "${FUSE_MOUNT_COMMAND[@]}" "$url" "$mnt" --pidfile "$pidfile" "$@" ||
    fail "mount of $url on $mnt failed"
  fuse_mounted "$mnt" fuse.iser-connect || fail "$mnt is not in /proc/mounts"
  [ -s "$pidfile" ] || fail "no pid file once mounted"
  FUSE_PID=$(cat "$pidfile")
  FUSE_PIDS+=("$FUSE_PID")
  kill -0 "$FUSE_PID" || fail "the serving process $FUSE_PID is gone"
}

# fuse_mount_foreground LOG URL MOUNTPOINT [options...]: a foreground mount (-f) under
# timeout(1), in the background with its stderr in LOG; returns once it is mounted. FUSE_PID is
# the timeout process, which passes signals on to the mount and exits with its status.
fuse_mount_foreground() {
  local log=$1 url=$2 mnt=$3
  shift 3
  timeout 60 "$ISER_FUSE_MOUNT" "$url" "$mnt" -f "$@" 2>"$log" &
  FUSE_PID=$!
  FUSE_MOUNTS+=("$mnt")
  FUSE_PIDS+=("$FUSE_PID")
  wait_for --pid "$FUSE_PID" 10 fuse_mounted "$mnt" ||
    fail "foreground mount of $url on $mnt failed: $(cat "$log")"
}

# Waits (bounded) for process $1 to exit.
fuse_wait_exit() {
  wait_for 20 exited "$1" || fail "process $1 still running 20 s after unmount"
}

fuse_unmount() {
  fusermount3 -u "$1" || fail "fusermount3 -u $1 failed"
  fuse_wait_exit "$FUSE_PID"
}

# fuse_mounted PATH [FSTYPE]: PATH is a mount point now, of that type if given (/proc/mounts
# writes a space in a path as \040).
fuse_mounted() {
  grep -qsF " ${1// /\\040} ${2:+$2 }" /proc/mounts
}

fuse_unmounted() {
  ! fuse_mounted "$1"
}

fuse_assert_unmounted() {
  fuse_unmounted "$1" || fail "$1 is still mounted"
}

# No initiator logged in to the target any more (the mount logged out).
fuse_assert_logged_out() {
  local out
  out=$(tgtadm --lld iscsi --op show --mode target)
  ! grep -q "I_T nexus: " <<<"$out" || fail "a session is still logged in: $out"
}

fuse_assert_logged_in() {
  tgtadm --lld iscsi --op show --mode target | grep -q "I_T nexus: " || fail "no session on the target"
}
