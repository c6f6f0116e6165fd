#!/bin/bash
# iser_test.sh PLUGIN SOFTRDMA_RUN: the same plugin over iSER, unchanged. tgtd's iSER target and
# nbdkit both run under softrdma (RDMA between processes, no hardware) in a private network
# namespace where 127.0.0.1:3260 serves iSER (tests/harness/iser-netns); nbdinfo sees the LUN,
# nbdcopy round-trips a random image (compared with tgtd's backing file) and fio verifies random
# writes over 2 connections.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
tgt_in_iser_netns "$2" 240 "$@"
requires nbdinfo nbdcopy fio cmp

IQN=iqn.2026-11.test:iser
export TGT_LLD=iser TGT_ISER_INITIATOR=iqn.2026-11.test:nbdkit
tgt_start
tgt_target 1 "$IQN"
tgt_lun 1 1 32M

nbd_start -v -D iser.verbose=1 -- "iser://127.0.0.1:3260/$IQN/1" initiator="$TGT_ISER_INITIATOR"
temp_dir WORK rdma

[ "$(timeout 30 nbdinfo --size "$(nbd_uri)")" = 33554432 ] || fail "size over iSER"
head -c 32M /dev/urandom >"$WORK/image"
timeout 120 nbdcopy --flush "$WORK/image" "$(nbd_uri)"
cmp "$WORK/image" "$(tgt_lun_file 1 1)" || fail "backing file differs after nbdcopy over iSER"
timeout 120 nbdcopy "$(nbd_uri)" "$WORK/back"
cmp "$WORK/image" "$WORK/back" || fail "image read back over iSER differs"
timeout 120 fio --name=iser --ioengine=nbd --uri="$(nbd_uri)" --rw=randwrite --bs=4k \
  --iodepth=16 --numjobs=2 --size=8M --offset_increment=8M --verify=crc32c --verify_fatal=1 \
  --do_verify=1 --output-format=terse >/dev/null || fail "fio verify over iSER"
nbd_stop
echo PASS
