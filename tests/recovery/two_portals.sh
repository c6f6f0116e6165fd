#!/bin/bash
# Two portals of one target: two tgtd processes serve the same backing file under the same IQN on
# two ports, the second given to the mount as the URL argument portal=HOST:PORT. The first hangs
# and is killed for good while fio writes with verification: I/O moves to the second portal
# within DefaultTime2Wait (2 s) plus a few seconds, and fio sees no error. This is the failover of
# one session (multipath=off): with the default, the two portals would be two paths
# (docs/multipath.md), which the multipath tests and the soak cover.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 32M
tgt_mirror
RECOVERY_LOGS+=("$TGT_DIR/tgtd-mirror.log")
second=127.0.0.1:$TGT_MIRROR_PORT
recovery_mount "$WORK/mount.log" \
  "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1?portal=$second&multipath=off"

timeout 120 fio --name=portals --filename="$MNT/lun1" --ioengine=libaio --direct=1 \
  --rw=randwrite --bsrange=4k-128k --iodepth=8 --numjobs=2 --size=16M --offset_increment=16M \
  --rate=1m --verify=crc32c --do_verify=1 --verify_fatal=1 \
  --output-format=json --output="$WORK/fio.json" 2>"$WORK/fio.err" &
fio_pid=$!
recovery_background $fio_pid
sleep 4
exited $fio_pid && fail "fio ended before the first portal was killed"
# Hung a moment first, so that commands are in flight when it dies and move to the second.
kill -STOP "$TGT_PID"
sleep 0.3
tgt_kill
echo "first portal 127.0.0.1:$TGT_PORT killed for good"
wait $fio_pid || fail "fio failed: $(cat "$WORK/fio.err")"
recovery_fio_check "$WORK/fio.json"

line=$(grep "recovered the session to .* after" "$WORK/mount.log") || fail "no recovery logged"
echo "$line"
grep -q "via .*$second" <<<"$line" || fail "not recovered via the second portal $second"
seconds=$(sed -n 's/.* after \([0-9.]*\) s via .*/\1/p' <<<"$line" | head -1)
[ -n "$seconds" ] || fail "no duration in '$line'"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 8 else 1)" "$seconds" ||
  fail "recovery via the second portal took $seconds s (expected DefaultTime2Wait + a few s)"
timeout 60 cmp "$MNT/lun1" "$(tgt_lun_file 1 1)" || fail "the LUN differs from the backing file"
recovery_unmount
echo PASS
