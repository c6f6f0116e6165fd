#!/bin/bash
# A target that crashes and comes back does not fail I/O on an `iser-connect mount`: fio writes
# at random with crc32c verification (2 jobs, libaio QD8, O_DIRECT) on the LUN file while tgtd
# is SIGKILLed and started again 10 times at random moments. fio sees no error and reads back
# everything it wrote intact; afterwards the whole LUN read through the mount equals the backing
# file, and the mount logged each recovery.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 64M
recovery_mount "$WORK/mount.log" "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1"

# Rate-limited so that the writes last about 64 s whatever the machine's speed: every restart
# meets I/O in flight. Each job writes its own half once, so the verification is exact.
timeout 240 fio --name=restart --filename="$MNT/lun1" --ioengine=libaio --direct=1 \
  --rw=randwrite --bsrange=4k-128k --iodepth=8 --numjobs=2 --size=32M --offset_increment=32M \
  --rate=512k --verify=crc32c --do_verify=1 --verify_fatal=1 \
  --output-format=json --output="$WORK/fio.json" 2>"$WORK/fio.err" &
fio_pid=$!
recovery_background $fio_pid
recovery_restarts $fio_pid 10 "$WORK/mount.log"
wait $fio_pid || fail "fio failed: $(cat "$WORK/fio.err")"
recovery_fio_check "$WORK/fio.json"

timeout 60 cmp "$MNT/lun1" "$(tgt_lun_file 1 1)" || fail "the LUN read through the mount differs from the backing file"
echo "whole LUN through the mount equals the backing file"
recoveries=$(recovery_count "$WORK/mount.log")
[ "$recoveries" -eq 10 ] || fail "$recoveries recoveries logged for 10 restarts"
replayed=$(recovery_replayed "$WORK/mount.log")
echo "$recoveries recoveries, $replayed commands replayed"
[ "$replayed" -gt 0 ] || fail "no command was in flight at any of the 10 crashes: replay untested"
grep "recovered the session to .* after" "$WORK/mount.log"
recovery_unmount
echo PASS
