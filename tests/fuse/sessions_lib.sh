# sessions_lib.sh: shared steps of the tests of `iser-connect login/session/logout` and of the
# whole-portal mount (bash library, sourced after set -euo pipefail, after lib.sh).
#
#   sessions_setup               # fuse_setup, a private runtime directory, cleanup at exit
#   ic ARGS...                   # the iser-connect binary under timeout(1)
#   sessions_url TID             # iscsi://127.0.0.1:PORT/iqn.2026-11.test:t<TID>
#   sessions_daemon_pid          # the session daemon's pid, from its state file
#   sessions_assert_gone         # no live process of this test's trees, nothing in the state dir
#
# ISER_CONNECT_RUNTIME_DIR (fuse_setup) points every tree process of the test at its own runtime
# directory, so tests run in parallel and never touch /run/iser-connect.

sessions_setup() {
  [ -n "${ISER_CONNECT:-}" ] && [ -x "$ISER_CONNECT" ] ||
    fail "ISER_CONNECT must name the iser-connect binary"
  fuse_setup
  ROOT=$ISER_CONNECT_RUNTIME_DIR/iser-connect
  STATE_DIR=$ISER_CONNECT_RUNTIME_DIR/iser-connect.d
  cleanup_push sessions_cleanup
}

ic() {
  timeout 120 "$ISER_CONNECT" "$@"
}

sessions_url() {
  echo "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t$1"
}

sessions_daemon_pid() {
  local f
  for f in "$STATE_DIR"/tree-*.state; do
    [ -e "$f" ] || continue
    if grep -qxF "root $ROOT" "$f"; then
      sed -n 's/^pid //p' "$f"
      return 0
    fi
  done
  return 1
}

# The live (not zombie) iser-connect processes started with this test's runtime directory: the
# tree processes and their unmount guards (a tgtd the test restarted has the variable too).
sessions_processes() {
  local p state
  for p in /proc/[0-9]*; do
    [[ "$(cat "$p/comm" 2>/dev/null)" == iser-* ]] || continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null |
      grep -qxF "ISER_CONNECT_RUNTIME_DIR=$ISER_CONNECT_RUNTIME_DIR" || continue
    state=$(awk '{print $3}' "$p/stat" 2>/dev/null) || continue
    [ "$state" = Z ] || echo "${p#/proc/}"
  done
}

sessions_no_process() {
  [ -z "$(sessions_processes)" ]
}

sessions_assert_gone() {
  wait_for 20 sessions_no_process || fail "processes left: $(sessions_processes | xargs -r ps -o pid,args -p)"
  fuse_unmounted "$ROOT" || fail "$ROOT is still mounted"
  [ -z "$(ls -A "$STATE_DIR")" ] || fail "state left in $STATE_DIR: $(ls -A "$STATE_DIR")"
}

sessions_cleanup() {
  local p
  for p in $(sessions_processes); do kill -9 "$p" 2>/dev/null || true; done
  if fuse_mounted "$ROOT"; then fusermount3 -u -z "$ROOT" 2>/dev/null || umount -l "$ROOT" || true; fi
}
