#!/bin/bash
# nbdkit_restart.sh PLUGIN: the same as fuse_restart.sh through `nbdkit iser` and fio's nbd
# engine: random writes with crc32c verification on 2 NBD connections while tgtd is SIGKILLed and
# started again 10 times; no error, everything read back intact, the whole LUN (nbdcopy) equals
# the backing file, and nbdkit logged each recovery. nbdkit is never restarted.
set -euo pipefail
. "$(dirname "$0")/../nbdkit/lib.sh" "$1"
. "$(dirname "$0")/lib.sh"
requires nbdcopy
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 64M
# -v: the plugin logs the library's info messages (the recoveries) as nbdkit debug messages.
nbd_start -v -- "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1"

timeout 240 fio --name=restart --ioengine=nbd --uri="$(nbd_uri)" --rw=randwrite \
  --bsrange=4k-128k --iodepth=8 --numjobs=2 --size=32M --offset_increment=32M --rate=512k \
  --verify=crc32c --do_verify=1 --verify_fatal=1 \
  --output-format=json --output="$WORK/fio.json" 2>"$WORK/fio.err" &
fio_pid=$!
recovery_background $fio_pid
recovery_restarts $fio_pid 10 "$NBD_DIR/log"
wait $fio_pid || fail "fio failed: $(cat "$WORK/fio.err")"
recovery_fio_check "$WORK/fio.json"

timeout 60 nbdcopy "$(nbd_uri)" "$WORK/back" || fail "nbdcopy of the LUN"
cmp "$WORK/back" "$(tgt_lun_file 1 1)" || fail "the LUN read through nbdkit differs from the backing file"
echo "whole LUN through nbdkit equals the backing file"
recoveries=$(recovery_count "$NBD_DIR/log")
[ "$recoveries" -eq 10 ] || fail "$recoveries recoveries logged for 10 restarts"
replayed=$(recovery_replayed "$NBD_DIR/log")
echo "$recoveries recoveries, $replayed commands replayed"
[ "$replayed" -gt 0 ] || fail "no command was in flight at any of the 10 crashes: replay untested"
grep "recovered the session to .* after" "$NBD_DIR/log"
echo PASS
