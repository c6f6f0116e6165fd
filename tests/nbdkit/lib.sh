# lib.sh: what every nbdkit plugin test shares (bash library, sourced after set -euo pipefail).
#
#   . tests/nbdkit/lib.sh PLUGIN_SO   # also sources tests/harness/tgt.sh (and functions.sh)
#   requires nbdinfo nbdcopy          # fail loudly if a tool is missing
#   tgt_start; tgt_target 1 IQN; tgt_lun 1 1 64M
#   nbd_start iscsi://127.0.0.1:$TGT_PORT/IQN [params...]   # nbdkit serving on $NBD_SOCK
#   nbdinfo "$(nbd_uri 1)"            # export "1" (LUN 1)
#   nbd_stop                          # also on the cleanup stack, before tgtd's; shows the
#                                     # end of nbdkit's log there when the test failed
#
# A plugin built with -DISER_SANITIZE=ON (or -DISER_TSAN=ON) needs libasan (libtsan) loaded before anything else, which an
# uninstrumented nbdkit does not do: nbdkit (and only nbdkit) then runs with libasan preloaded.
# Leak checking is off for that process because nbdkit's own allocations are not ours to judge.
# Known wart of that setup (glibc 2.36, gcc 12 libasan, nbdkit 1.32): once anything has called
# strerror, nbdkit deadlocks in exit (p11-kit's destructor waits on glibc's locale lock, whose
# reader count has gone negative); nbdkit's own file plugin does the same. So every nbdkit run is
# bounded, and a test that expects nbdkit to fail accepts the timeout's status under ASan.

NBD_PLUGIN=$1
NBD_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$NBD_LIB_DIR/../harness/tgt.sh"

requires nbdkit
[ -f "$NBD_PLUGIN" ] || fail "no plugin at $NBD_PLUGIN"

# The test's own session table, where nbdkit registers (docs/sessions.md): never the user's, and
# tests that run at once never see each other's.
temp_dir NBD_RUNTIME_DIR run
export ISER_CONNECT_RUNTIME_DIR=$NBD_RUNTIME_DIR

sanitizer_preload NBD_ENV "$NBD_PLUGIN"

# nbd_fails PATTERN ARGS...: nbdkit with the plugin and ARGS must exit non-zero at start-up,
# printing an error that matches the extended regex PATTERN.
nbd_fails() {
  local pattern=$1 out rc=0 limit=30
  shift
  [ ${#NBD_ENV[@]} -eq 0 ] || limit=8
  out=$(env "${NBD_ENV[@]}" timeout -k 2 $limit nbdkit -f "$NBD_PLUGIN" "$@" \
          --run 'echo SERVED' 2>&1) || rc=$?
  echo "nbdkit $*: exit $rc: $out"
  [ "$rc" -ne 0 ] || fail "nbdkit $* exited 0"
  [ "$rc" -lt 124 ] || [ ${#NBD_ENV[@]} -gt 0 ] || fail "nbdkit $* did not exit"
  grep -q SERVED <<<"$out" && fail "nbdkit $* served an export"
  grep -Eq "$pattern" <<<"$out" || fail "nbdkit $*: no error matching '$pattern'"
}

# nbd_start [nbdkit options --] URL [params...]: serves on a fresh Unix socket $NBD_SOCK and
# returns once nbdkit has written its pid file: after get_ready, but before the plugin's
# after_fork (its login for good and its registration in the session table) has ended.
nbd_start() {
  local opts=()
  if [[ " $* " == *" -- "* ]]; then
    while [ "$1" != -- ]; do
      opts+=("$1")
      shift
    done
    shift
  fi
  temp_dir NBD_DIR nbdkit
  NBD_SOCK=$NBD_DIR/sock
  # A bound on a hung test; a run meant to last longer (the soak) raises it with NBD_TIMEOUT.
  env "${NBD_ENV[@]}" timeout "${NBD_TIMEOUT:-600}" nbdkit -f -U "$NBD_SOCK" -P "$NBD_DIR/pid" "${opts[@]}" \
    "$NBD_PLUGIN" "$@" 2>"$NBD_DIR/log" &
  NBD_PID=$!
  cleanup_push nbd_stop
  wait_for --pid "$NBD_PID" 30 test -s "$NBD_DIR/pid" ||
    fail "nbdkit did not become ready: $(cat "$NBD_DIR/log")"
}

nbd_uri() { echo "nbd+unix:///${1:-}?socket=$NBD_SOCK"; }

nbd_stop() {
  [ -n "${NBD_PID:-}" ] || return 0
  # NBD_PID is the timeout(1) wrapper; the pid file names nbdkit itself, which is what must go
  # (under ASan it may hang in exit, see above, and then only SIGKILL ends it).
  # timeout(1) exits, and is reaped here, once nbdkit has.
  local server
  server=$(cat "$NBD_DIR/pid" 2>/dev/null || echo "$NBD_PID")
  kill "$server" 2>/dev/null || true
  wait_for 10 exited "$NBD_PID" || true
  kill -9 "$server" 2>/dev/null || true
  wait "$NBD_PID" 2>/dev/null || true
  NBD_PID=
  if grep -q 'ERROR: AddressSanitizer\|runtime error:' "$NBD_DIR/log"; then
    cat "$NBD_DIR/log" >&2
    echo "FAIL: sanitizer report from nbdkit" >&2
    return 1
  fi
  if [ "${CLEANUP_STATUS:-0}" -ne 0 ] && [ -s "$NBD_DIR/log" ]; then
    echo "--- nbdkit log (last 40 lines) ---" >&2
    tail -40 "$NBD_DIR/log" >&2
  fi
}

# expect_info INFO KEY VALUE: nbdinfo's text output INFO says "KEY: VALUE" (first match).
expect_info() {
  local info=$1 key=$2 want=$3 got
  got=$(sed -n "s/^[[:space:]]*$key: //p" <<<"$info" | head -1)
  [ "$got" = "$want" ] || fail "$key is '$got', expected '$want'"
}
