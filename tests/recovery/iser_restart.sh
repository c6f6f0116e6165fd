#!/bin/bash
# fuse_restart.sh over iSER: tgtd's iSER target under softrdma in a network namespace of its own
# (run under tests/harness/iser-netns SOFTRDMA_RUN; softrdma reaches the mount through the
# environment). fio writes with crc32c verification on the LUN file of an `iser-connect mount`
# while tgtd is SIGKILLed and restarted 5 times. Then the RDMA connection is cut in the middle of
# I/O by softrdma's fault injection: tgtd runs with SOFTRDMA_DROP_AFTER, which cuts the connection
# carrying its next send work request after that many (RETRY_EXC_ERR, flushes, DISCONNECTED) once;
# the session recovers to the same tgtd, still running. fio sees no error in either part and the
# LUN equals the backing file.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "${ISER_TEST_NETNS:-}" = 1 ] || fail "run under tests/harness/iser-netns SOFTRDMA_RUN"
export TGT_LLD=iser TGT_ISER_INITIATOR=iqn.2026-11.io.iser-connect.test:recovery-iser
export ISER_CONNECT_INITIATOR_NAME=$TGT_ISER_INITIATOR
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 32M
LOG=$WORK/mount.log
recovery_mount "$LOG" "iser://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1"

# fio_start NAME MIB: each of 2 jobs writes its own MIB MiB of the LUN once, rate-limited (about
# MIB*2 s), then reads it back and verifies it; pid in FIO_PID.
fio_start() {
  timeout 150 fio --name="$1" --filename="$MNT/lun1" --ioengine=libaio --direct=1 \
    --rw=randwrite --bsrange=4k-128k --iodepth=8 --numjobs=2 --size="$2"M \
    --offset_increment=16M --rate=512k --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --output-format=json --output="$WORK/$1.json" 2>"$WORK/$1.err" &
  FIO_PID=$!
  recovery_background $FIO_PID
}
fio_done() {
  wait "$FIO_PID" || fail "fio $1 failed: $(cat "$WORK/$1.err")"
  recovery_fio_check "$WORK/$1.json"
}
losses() { grep -c " lost: " "$LOG" || true; }
lost_more_than() { [ "$(losses)" -gt "$1" ]; }

fio_start restarts 16
recovery_restarts "$FIO_PID" 5 "$LOG"
fio_done restarts
echo "5 restarts over iSER: no I/O error, everything verified"

# A target whose RDMA connection is cut after 300 more send work requests (the login takes a
# few; then about 3 per command): mid-I/O once fio runs.
recovered=$(recovery_count "$LOG")
tgt_kill
TGT_WRAP="env SOFTRDMA_DROP_AFTER=300" tgt_restart
wait_for 20 recovery_logged "$LOG" "$recovered" ||
  fail "no recovery to the target with the fault injected"
recovered=$(recovery_count "$LOG")
lost=$(losses)
fio_start cut 8
wait_for 30 lost_more_than "$lost" || fail "softrdma did not cut the connection within 30 s"
exited "$FIO_PID" && fail "fio ended before the cut"
grep " lost: " "$LOG" | tail -1
wait_for 20 recovery_logged "$LOG" "$recovered" ||
  fail "no recovery to the same tgtd within 20 s of the cut"
fio_done cut
echo "RDMA connection cut mid-I/O: recovered to the same tgtd, no I/O error, everything verified"

timeout 60 cmp "$MNT/lun1" "$(tgt_lun_file 1 1)" || fail "the LUN differs from the backing file"
grep "recovered the session to .* after" "$LOG"
recovery_unmount
echo PASS
