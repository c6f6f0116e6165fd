#!/bin/bash
# fua_flush_test.sh PLUGIN: FUA and flush reach the target. A tshark capture of the iSCSI
# traffic must show the FUA write as WRITE with the FUA bit (the LUN reports DPOFUA; without it,
# a SYNCHRONIZE CACHE after the write), the plain write without it, and the NBD flush as
# SYNCHRONIZE CACHE; the capture must dissect without malformed packets or expert errors.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires qemu-io tshark

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 64M
nbd_start -v -- iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk

temp_dir WORK fua
. "$NBD_LIB_DIR/../harness/capture.sh"

capture_start "$TGT_PORT" "$WORK"
# Three steps, each completed before the next: FUA write at LBA 2048, plain write at LBA 4096,
# flush. Write-back, or qemu-io would set FUA on every write.
timeout 60 qemu-io -t writeback -f raw "$(nbd_uri 1)" -c 'write -f -P 0x11 1M 64k' -c 'write -P 0x22 2M 64k' \
  -c flush >/dev/null
capture_stop

capture_assert_clean
dpofua=no
grep -q 'LUN 1: .*dpofua=1' "$NBD_DIR/log" && dpofua=yes
# The flush, and qemu-io's own at close.
capture_expect_durability $dpofua 2048 2

# The data is in the target's backing file.
cmp <(dd if="$(tgt_lun_file 1 1)" bs=64k skip=16 count=1 status=none) <(head -c 64k /dev/zero | tr '\0' '\021') ||
  fail "FUA write not in the backing file"
nbd_stop
echo PASS
