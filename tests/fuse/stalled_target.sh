#!/bin/bash
# A stalled target never holds up the session daemon's control socket. Target 2 is served by a
# second tgtd (tgt_mirror), which the test stops with SIGSTOP: its session's commands then wait
# for the NOP-Out timeout, the recovery and up to the replacement timeout (120 s). Meanwhile
# `session`, `login` and `logout` of the other targets, served by the first tgtd, must answer at
# once, both while the LUN watch rescans the stalled target (it met UNIT ATTENTION 3F/0E just
# before the stop) and while a `session --rescan` waits for it. Each is bounded by 10 s, far
# less than what the stalled commands wait. Once tgtd continues, the rescan finishes and the
# stalled target's new LUN appears.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd tgtadm
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
T3=iqn.2026-11.test:t3
tgt_target 1 "$T1"
tgt_lun 1 1 8M
tgt_target 2 "$T2"
tgt_lun 2 1 8M
tgt_target 3 "$T3"
tgt_lun 3 1 8M
tgt_mirror
T2_URL="iscsi://127.0.0.1:$TGT_MIRROR_PORT/$T2"

ic login "$(sessions_url 1)" || fail "login to $T1"
ic login "$T2_URL" || fail "login to $T2 through the second tgtd"
[ -f "$ROOT/$T2/lun1" ] || fail "$T2/lun1 is missing: $(ls -R "$ROOT")"

stalled=
resume() {
  if [ -n "$stalled" ]; then kill -CONT "$TGT_MIRROR_PID" 2>/dev/null || true; fi
  stalled=
}
cleanup_push resume

# answers WHAT COMMAND...: COMMAND ends well within 10 s; its output is in $FUSE_DIR/answer.
answers() {
  local what=$1
  shift
  timeout 10 "$ISER_CONNECT" "$@" >"$FUSE_DIR/answer" 2>&1 ||
    fail "$what did not answer within 10 s while $T2 is stalled (exit $?): $(cat "$FUSE_DIR/answer")"
}

# The state `session --json` (in $FUSE_DIR/answer) gives target $1's session is $2.
in_state() {
  python3 -c 'import json, sys; d = {s["target"]: s["state"] for s in json.load(open(sys.argv[1]))}
sys.exit(d.get(sys.argv[2]) != sys.argv[3])' "$FUSE_DIR/answer" "$1" "$2"
}
t2_recovering() {
  answers "session" session --json
  in_state "$T2" recovering
}

# The LUN watch: a LUN added to target 2 raises 3F/0E, which a read meets; the watch rescans
# target 2 within a second, and tgtd is stopped well before that. The session is in recovery
# once its NOP-Out went unanswered (10 s), long after the watch began waiting for the target.
TGT_IPC_SOCKET=$TGT_MIRROR_IPC tgtadm --lld iscsi --op new --mode logicalunit --tid 2 --lun 2 \
  -b "$(tgt_lun_file 2 1)" || fail "adding LUN 2 to $T2"
timeout 60 dd if="$ROOT/$T2/lun1" of=/dev/null bs=4k count=1 iflag=direct status=none ||
  fail "reading $T2/lun1"
kill -STOP "$TGT_MIRROR_PID"
stalled=1
wait_for 60 t2_recovering || fail "$T2 is not recovering 60 s after its tgtd stopped: $(cat "$FUSE_DIR/answer")"
in_state "$T1" "logged in" || fail "session: $(cat "$FUSE_DIR/answer")"
# Had the watch read target 2's LUNs in the moment between the read and the stop, nothing would
# wait for the stalled target below, and the checks would prove nothing.
[ ! -e "$ROOT/$T2/lun2" ] || fail "the LUN watch read $T2's LUNs before its tgtd stopped"
answers "login of $T3" login "$(sessions_url 3)"
[ -f "$ROOT/$T3/lun1" ] || fail "$T3/lun1 is missing after its login: $(ls "$ROOT")"
answers "logout of $T3" logout -T "$T3"
[ ! -e "$ROOT/$T3" ] || fail "$T3 is still in the tree after its logout"
echo "while the LUN watch waits for a target in recovery, session, login and logout answer: ok"

# A rescan request, which waits for the stalled target, holds up nobody else either.
ic session --rescan >"$FUSE_DIR/rescan.out" 2>&1 &
rescan=$!
cleanup_push "kill $rescan 2>/dev/null || true"
answers "session" session
kill -0 "$rescan" 2>/dev/null ||
  fail "session --rescan ended while $T2 is stalled: $(cat "$FUSE_DIR/rescan.out")"
echo "while a rescan waits for a target in recovery, session answers: ok"

resume
wait "$rescan" || fail "session --rescan failed once $T2 continued: $(cat "$FUSE_DIR/rescan.out")"
wait_for 90 test -f "$ROOT/$T2/lun2" || fail "$T2/lun2 did not appear once $T2 continued"
ic logout --all || fail "logout --all"
# It was started after sessions_setup, with the environment that marks this test's processes.
tgt_mirror_stop
sessions_assert_gone
echo PASS
