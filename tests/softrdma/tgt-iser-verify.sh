#!/bin/bash
# A libiscsi program writes random blocks (512 B to 256 KiB) over iser:// to tgtd under softrdma
# and checks them against the backing file: one session, then two sessions on two LUNs at once,
# then 20 sessions in a row while tgtd's open fds must not grow.
# Usage: tgt-iser-verify.sh PATH_TO_softrdma_iser_verify
set -eu
TGT_LIB_TIMEOUT=150
VERIFY=$1
. "$(dirname "$0")/tgt-lib.sh"
[ -x "$VERIFY" ] || fail "$VERIFY is missing"
start_tgtd 32 2
URL="iser://127.0.0.1:3260/$IQN"

timeout 60 "$SOFTRDMA_RUN" "$VERIFY" "$INITIATOR" "$URL/1" "$(lun_file 1)" 200 1

timeout 60 "$SOFTRDMA_RUN" "$VERIFY" "$INITIATOR" "$URL/1" "$(lun_file 1)" 100 2 &
a=$!
timeout 60 "$SOFTRDMA_RUN" "$VERIFY" "$INITIATOR" "$URL/2" "$(lun_file 2)" 100 3 &
b=$!
wait $a || fail "session on LUN 1"
wait $b || fail "session on LUN 2"

fds() { ls /proc/"$TGT_PID"/fd | wc -l; }
before=$(fds)
for i in $(seq 20); do
  timeout 20 "$SOFTRDMA_RUN" "$VERIFY" "$INITIATOR" "$URL/1" "$(lun_file 1)" 2 "$((10 + i))" >/dev/null
done
# tgtd frees a connection at TIMEWAIT_EXIT, which softrdma reports half a second after the
# disconnect, as RoCE does: give the last ones time to go.
fds_back() {
  after=$(fds)
  [ "$after" -le "$before" ]
}
wait_for 10 fds_back || true
echo "tgtd open fds: $before before 20 sessions, $after after"
[ "$after" -le "$before" ] || fail "tgtd leaks fds ($before -> $after)"
echo PASS
