#!/bin/bash
# replacement_timeout=3 (a URL argument): with the target down for 10 s, a read started right
# after the crash waits for recovery and fails with EIO after about 3 s (not before 2.5 s, and
# well before the target is back); a read while recovery goes on fails at once; the loss and each
# login attempt are warnings in the mount's log. Once tgtd is back, the same mount reads and
# writes correctly again, without a remount.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires dd
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 16M
recovery_mount "$WORK/mount.log" \
  "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1?replacement_timeout=3"
F=$MNT/lun1

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# read_eio WHAT MIN_MS MAX_MS: a direct read of the first 64 KiB fails with EIO within
# [MIN_MS, MAX_MS] of its start.
read_eio() {
  local what=$1 min=$2 max=$3 t0 elapsed rc=0
  t0=$(now_ms)
  timeout 60 dd if="$F" of=/dev/null bs=64k count=1 iflag=direct 2>"$WORK/dd.err" || rc=$?
  elapsed=$(($(now_ms) - t0))
  echo "$what: exit $rc after $elapsed ms: $(tail -1 "$WORK/dd.err")"
  [ $rc -ne 0 ] || fail "$what: the read succeeded with the target down"
  grep -q "Input/output error" "$WORK/dd.err" || fail "$what: not EIO: $(cat "$WORK/dd.err")"
  [ "$elapsed" -ge "$min" ] || fail "$what: failed after $elapsed ms, before $min ms"
  [ "$elapsed" -le "$max" ] || fail "$what: failed after $elapsed ms, later than $max ms"
}

head -c 1M /dev/urandom >"$WORK/before"
timeout 30 dd if="$WORK/before" of="$F" bs=1M oflag=direct conv=notrunc status=none ||
  fail "write with the target up"

tgt_kill
killed=$(now_ms)
read_eio "read right after the crash" 2500 8000
grep -q "gave up waiting for the session to .* after" "$WORK/mount.log" || fail "the mount did not log that it gave up waiting"
# The loss and every login attempt so far are warnings, with the cause and their number.
grep -q "^warning: session to .* lost: .*; recovering (loss 1 in a row)" "$WORK/mount.log" ||
  fail "the mount did not log the loss as a numbered warning"
grep -Eq "^warning: recovering the session to .*: attempt 1 at 127.0.0.1:$TGT_PORT failed: .+" \
  "$WORK/mount.log" || fail "the mount did not log its first login attempt as a warning"
read_eio "read once replacement_timeout has passed" 0 1500

left=$((10000 - ($(now_ms) - killed)))
sleep "$((left / 1000)).$(printf %03d $((left % 1000)))"
tgt_restart
echo "tgtd back $(($(now_ms) - killed)) ms after the crash"
read_ok() { timeout 10 dd if="$F" of=/dev/null bs=64k count=1 iflag=direct status=none 2>/dev/null; }
wait_for 20 read_ok ||
  fail "no read succeeded within 20 s of the target's return"
echo "reads work again $(($(now_ms) - killed)) ms after the crash"

cmp -n 1M "$WORK/before" "$F" || fail "the data written before the crash reads back differently"
head -c 4M /dev/urandom >"$WORK/after"
timeout 30 dd if="$WORK/after" of="$F" bs=1M seek=2 oflag=direct conv=notrunc status=none ||
  fail "write after the target's return"
cmp -n 4M "$WORK/after" <(dd if="$F" bs=1M skip=2 count=4 iflag=direct status=none) ||
  fail "read back after the target's return differs"
cmp "$F" "$(tgt_lun_file 1 1)" || fail "the LUN differs from the backing file"
echo "same mount reads and writes again, data equals the backing file"
recovery_unmount
echo PASS
