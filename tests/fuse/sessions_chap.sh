#!/bin/bash
# Secrets and failures of `iser-connect login`: a CHAP target logged in with --password-file (the
# secret is in no process's argv, in no output at --log-level debug, in no state file; the state
# directory is 0700, its socket and state file 0600); a login with the wrong password fails with
# exit 24 and leaves the other session alone; a session daemon killed with SIGKILL leaves state
# that the next login cleans up before it starts afresh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
SECRET=Chap-Secret-4711x
tgt_target 1 "$T1"
tgt_lun 1 1 32M
tgt_target 2 "$T2"
tgt_lun 2 1 32M
tgt_chap 2 chapuser "$SECRET"
printf '%s\n' "$SECRET" >"$FUSE_DIR/secret"
printf '%s\n' wrong-secret-0000 >"$FUSE_DIR/wrong"
chmod 600 "$FUSE_DIR/secret" "$FUSE_DIR/wrong"
CHAP_URL=iscsi://chapuser@127.0.0.1:$TGT_PORT/$T2

ic login "$(sessions_url 1)" || fail "login to $T1"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=8 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/$T1/lun1" bs=1M conv=fsync,notrunc status=none

expect_exit 24 "" "$ISER_CONNECT" login "$CHAP_URL" --password-file "$FUSE_DIR/wrong"
[ ! -e "$ROOT/$T2" ] || fail "$T2 appeared after a failed login"
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$ROOT/$T1/lun1" || fail "$T1 after the failed login"
ic session | grep -q " $T1 (non-flash)$" || fail "$T1 is no longer listed"
echo "wrong CHAP password: exit 24, other session unharmed: ok"

ic login "$CHAP_URL" --password-file "$FUSE_DIR/secret" --log-level debug >"$FUSE_DIR/out" 2>&1 ||
  fail "CHAP login: $(cat "$FUSE_DIR/out")"
[ -f "$ROOT/$T2/lun1" ] || fail "$T2/lun1 is missing"
grep -c . "$FUSE_DIR/out" >/dev/null || fail "no debug output to check"
! grep -qF "$SECRET" "$FUSE_DIR/out" || fail "the secret is in the login's output"
ic session --json --log-level debug >"$FUSE_DIR/out" 2>&1 || fail "session"
! grep -qF "$SECRET" "$FUSE_DIR/out" || fail "the secret is in session's output"
for p in /proc/[0-9]*; do
  ! { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF "$SECRET" || fail "the secret is in the argv of ${p#/proc/}"
done
! grep -rqF "$SECRET" "$STATE_DIR" || fail "the secret is in a state file"
[ "$(stat -c %a "$STATE_DIR")" = 700 ] || fail "state directory mode $(stat -c %a "$STATE_DIR")"
for f in "$STATE_DIR"/*; do
  [ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f")"
done
# The daemon's socket and state file, and a SID claim per session.
[ "$(ls "$STATE_DIR" | sort | tr '\n' ' ')" = "sid-1 sid-2 $(cd "$STATE_DIR" && ls tree-* | tr '\n' ' ')" ] ||
  fail "state directory holds: $(ls "$STATE_DIR")"
echo "CHAP secret kept out of argv, output and state; modes: ok"

PID=$(sessions_daemon_pid) || fail "no state file names the daemon"
kill -9 "$PID"
wait_for 10 exited "$PID" || fail "daemon $PID survived SIGKILL"
ls "$STATE_DIR"/*.sock >/dev/null || fail "the killed daemon left no socket (nothing to test)"
expect_exit 21 "no active sessions; the process that served $ROOT \\(pid $PID\\) is gone and left its state behind: the next login to that tree cleans it up" \
  "$ISER_CONNECT" session
ic login "$(sessions_url 1)" >"$FUSE_DIR/out" 2>&1 || fail "login after SIGKILL: $(cat "$FUSE_DIR/out")"
grep -q "cleaning up after a tree process that is gone (pid $PID)" "$FUSE_DIR/out" ||
  fail "no log line about the stale state: $(cat "$FUSE_DIR/out")"
NEW=$(sessions_daemon_pid) || fail "no daemon after the new login"
[ "$NEW" != "$PID" ] || fail "the state file still names the killed daemon"
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$ROOT/$T1/lun1" || fail "$T1 after the new login"
[ "$(ls "$ROOT")" = "$T1" ] || fail "tree after the new login: $(ls "$ROOT")"
echo "stale state after SIGKILL cleaned by the next login: ok"

ic logout --all || fail "logout --all"
sessions_assert_gone
checks_done
