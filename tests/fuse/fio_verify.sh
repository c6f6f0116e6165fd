#!/bin/bash
# fio random writes with verification from 4 jobs, psync and libaio, direct=1.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires fio
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 128M
fuse_mount "$(fuse_url 1 1)" "$MNT"
for engine in psync libaio; do
  timeout 300 fio --name=verify-$engine --filename="$MNT/lun1" --ioengine=$engine --direct=1 \
    --rw=randwrite --bsrange=4k-256k --size=32M --numjobs=4 --offset_increment=32M \
    --iodepth=16 --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting \
    --output="$FUSE_DIR/fio-$engine.txt" || { cat "$FUSE_DIR/fio-$engine.txt"; fail "fio $engine"; }
  grep -q "err= 0" "$FUSE_DIR/fio-$engine.txt" || { cat "$FUSE_DIR/fio-$engine.txt"; fail "fio $engine errors"; }
  echo "fio $engine randwrite verify, 4 jobs: ok"
done
fuse_unmount "$MNT"
fuse_assert_logged_out
