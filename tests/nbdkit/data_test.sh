#!/bin/bash
# data_test.sh PLUGIN: bytes go through unchanged. nbdcopy writes a random image into a LUN and
# reads it back (compared with the image and with tgtd's backing file); fio writes at random
# with verify=crc32c, queue depth 32 on each of 4 connections.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo nbdcopy fio cmp

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 64M
nbd_start iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk

temp_dir WORK data

head -c 64M /dev/urandom >"$WORK/image"
timeout 120 nbdcopy --flush "$WORK/image" "$(nbd_uri 1)"
cmp "$WORK/image" "$(tgt_lun_file 1 1)" || fail "the backing file differs from the image"
timeout 120 nbdcopy "$(nbd_uri 1)" "$WORK/back"
cmp "$WORK/image" "$WORK/back" || fail "the image read back differs"
echo "nbdcopy round trip: ok"

fio_nbd() {
  timeout 240 fio --name=nbd --ioengine=nbd --uri="$1" --direct=1 --group_reporting \
    --output-format=terse --terse-version=3 "${@:2}" >"$WORK/fio.out" ||
    { cat "$WORK/fio.out"; fail "fio $*"; }
}

# 4 connections, QD32 each, each job on its own quarter so that verification is exact.
fio_nbd "$(nbd_uri 1)" --rw=randwrite --bs=4k --iodepth=32 --numjobs=4 --size=16M \
  --offset_increment=16M --verify=crc32c --verify_fatal=1 --do_verify=1
echo "fio randwrite verify, 4 connections x QD32: ok"

nbd_stop
echo PASS
