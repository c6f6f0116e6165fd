#!/bin/bash
# session_table_test.sh PLUGIN ISER_CONNECT: nbdkit serving with the plugin is in its user's
# session table (docs/sessions.md). `iser-connect session` lists its session, held by nbdkit with
# its URL; a login of the target it holds is "session exists" (15) naming it; `logout -T` logs
# out, ends nbdkit and takes its state away. A whole portal's sessions end only together: a logout
# of one target is refused, `logout --all` ends them all. An nbdkit killed with SIGKILL leaves
# state that `session` names and the next nbdkit removes.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
ISER_CONNECT=$2
requires nbdinfo nbdcopy cmp
[ -x "$ISER_CONNECT" ] || fail "no iser-connect at $ISER_CONNECT"

temp_dir WORK table
STATE_DIR=$ISER_CONNECT_RUNTIME_DIR/iser-connect.d  # lib.sh's, the test's own
ic() { timeout 60 "$ISER_CONNECT" "$@"; }
state_empty() { [ -z "$(ls -A "$STATE_DIR" 2>/dev/null)" ]; }
# nbdkit writes its pid file before the plugin's after_fork, where it registers: wait for that.
registered() { grep -qsx "pid $(cat "$NBD_DIR/pid")" "$STATE_DIR"/tree-*.state; }
nbd_start_registered() {
  nbd_start "$@"
  wait_for 30 registered || fail "nbdkit did not register: $(ls -A "$STATE_DIR" 2>&1)"
}

tgt_start
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 16M
tgt_target 2 "$T2"
tgt_lun 2 1 16M
U1=iscsi://127.0.0.1:$TGT_PORT/$T1

nbd_start_registered "$U1"
server=$(cat "$NBD_DIR/pid")
out=$(ic session) || fail "session: $out"
grep -qx "tcp: \[1\] 127.0.0.1:$TGT_PORT,1 $T1 (non-flash)" <<<"$out" || fail "session: $out"
out=$(ic session -P 1) || fail "session -P 1: $out"
grep -qF "Held by: nbdkit $U1 (pid $server)" <<<"$out" || fail "session -P 1: $out"
expect_exit 15 "already logged in to $T1 in $U1" "$ISER_CONNECT" login "$U1"
echo "session lists nbdkit's session; a login of its target is 15: ok"

head -c 1M /dev/urandom >"$WORK/data"
timeout 30 nbdcopy "$WORK/data" "$(nbd_uri 1)" || fail "nbdcopy to the export"
out=$(ic logout -T "$T1") || fail "logout -T $T1: $out"
[ "$out" = "Logout of [target: $T1] successful: $U1" ] || fail "logout said: $out"
state_empty || fail "nbdkit's state is left: $(ls -A "$STATE_DIR")"
cmp -n $((1 << 20)) "$WORK/data" "$(tgt_lun_file 1 1)" || fail "the data written before the logout"
# Under ASan nbdkit may hang in exit after its cleanup (lib.sh): then only its log says it ended.
[ ${#NBD_ENV[@]} -gt 0 ] || wait_for 20 exited "$NBD_PID" || fail "nbdkit still runs after the logout"
expect_exit 21 "no active sessions" "$ISER_CONNECT" session
nbd_stop
echo "logout -T ends nbdkit after logging out: ok"

nbd_start_registered "iscsi://127.0.0.1:$TGT_PORT"
# No client used a target yet: nbdkit holds no session, and a logout of everything leaves it be.
expect_exit 21 "no active sessions" "$ISER_CONNECT" logout --all
kill -0 "$(cat "$NBD_DIR/pid")" || fail "logout --all ended an nbdkit that held no session"
for t in "$T1" "$T2"; do
  timeout 30 nbdinfo --size "$(nbd_uri "$t/1")" >/dev/null || fail "nbdinfo of $t/1"
done
[ "$(ic session | grep -c "(non-flash)$")" = 2 ] || fail "session: $(ic session)"
expect_exit 1 "sessions, which end together with it: logout --all, or stop that nbdkit" \
  "$ISER_CONNECT" logout -T "$T1"
[ "$(ic session | grep -c "(non-flash)$")" = 2 ] || fail "a refused logout ended a session"
out=$(ic logout --all) || fail "logout --all: $out"
[ "$(grep -c "^Logout of \[target: iqn.2026-11.test:t[12]\] successful: iscsi://127.0.0.1:$TGT_PORT$" <<<"$out")" = 2 ] ||
  fail "logout --all said: $out"
state_empty || fail "nbdkit's state is left: $(ls -A "$STATE_DIR")"
nbd_stop
echo "a whole portal's sessions end together: ok"

nbd_start_registered "$U1"
killed=$(cat "$NBD_DIR/pid")
kill -9 "$killed"
nbd_stop
expect_exit 21 "the process that served $U1 \\(pid $killed\\) is gone and left its state behind: the next nbdkit" \
  "$ISER_CONNECT" session
nbd_start_registered "$U1"
! grep -lx "pid $killed" "$STATE_DIR"/*.state || fail "the killed nbdkit's state is still there"
[ "$(ls "$STATE_DIR"/*.sock | wc -l)" = 1 ] || fail "sockets: $(ls "$STATE_DIR")"
ic session | grep -q " $T1 (non-flash)$" || fail "the new nbdkit is not listed"
nbd_stop
state_empty || fail "state left after nbdkit stopped: $(ls -A "$STATE_DIR")"
echo "the next nbdkit removes what a killed one left: ok"
echo PASS
