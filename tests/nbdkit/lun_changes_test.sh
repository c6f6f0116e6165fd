#!/bin/bash
# lun_changes_test.sh PLUGIN: LUNs that change while nbdkit serves the target. tgtd 1.0.85 raises
# UNIT ATTENTION 3F/0E (reported LUNs data has changed) on the live session when a LUN is added
# or deleted (on the LUNs the session has used), and resizes a LUN only by deleting it and creating
# it again on the resized backing file (it never raises 2A/09, and the resized LUN reports
# nothing). A LUN added is listed as a new export; a LUN grown is served at its new size to the
# next connection, which reads and writes past the old end; a LUN deleted is no longer listed;
# nbdkit's log (-v) says what changed.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
requires nbdinfo nbdcopy qemu-io cmp truncate tgtadm

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 16M
nbd_start -v -- iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk

temp_dir WORK lun-changes
exports() { timeout 30 nbdinfo --list --json "$(nbd_uri)" |
  python3 -c 'import json,sys; print(" ".join(e["export-name"] for e in json.load(sys.stdin)["exports"]))'; }
size_of() { timeout 30 nbdinfo --size "$(nbd_uri "$1")"; }
logged() { grep -qF "$1" "$NBD_DIR/log" || fail "nbdkit's log lacks '$1': $(tail -20 "$NBD_DIR/log")"; }

[ "$(exports)" = 1 ] || fail "exports at start: $(exports)"
[ "$(size_of 1)" = $((16 << 20)) ] || fail "size of export 1 at start: $(size_of 1)"
qio() { timeout 60 qemu-io -f raw "$@" >"$WORK/qio.out" || { cat "$WORK/qio.out"; fail "qemu-io $*"; }; }
qio "$(nbd_uri 1)" -c "read 0 4k"

# tgtd raises 3F/0E on the LUNs the session has used: the next read of LUN 1 meets it.
tgt_lun 1 2 8M
qio "$(nbd_uri 1)" -c "read 0 4k"
[ "$(exports)" = "1 2" ] || fail "exports after adding LUN 2: $(exports)"
[ "$(size_of 2)" = $((8 << 20)) ] || fail "size of export 2: $(size_of 2)"

tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1 || fail "deleting LUN 1"
truncate -s 32M "$(tgt_lun_file 1 1)"
tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$(tgt_lun_file 1 1)" ||
  fail "creating LUN 1 again"
[ "$(size_of 1)" = $((32 << 20)) ] || fail "export 1 grown to 32 MiB is served at $(size_of 1) bytes"
head -c 1M /dev/urandom >"$WORK/data"
qio "$(nbd_uri 1)" -c "write -s $WORK/data 24M 1M"
cmp -n $((1 << 20)) "$WORK/data" <(tail -c +$(((24 << 20) + 1)) "$(tgt_lun_file 1 1)") ||
  fail "data past export 1's old end, in the backing file"
timeout 60 nbdcopy "$(nbd_uri 1)" "$WORK/copy" || fail "reading export 1 whole"
[ "$(stat -c %s "$WORK/copy")" = $((32 << 20)) ] || fail "export 1 read as $(stat -c %s "$WORK/copy") bytes"
cmp "$WORK/copy" "$(tgt_lun_file 1 1)" || fail "export 1 read back differs from its backing file"
logged "REPORTED LUNS DATA HAS CHANGED (0x3f/0x0e)"
logged "LUN 2 appeared: export 2"
logged "LUN 1 of iqn.2026-11.test:disk: capacity changed from 16777216 to 33554432 bytes"
echo "a LUN added is listed, a LUN grown is served at its new size: ok"

tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 2 || fail "deleting LUN 2"
[ "$(exports)" = 1 ] || fail "exports after deleting LUN 2: $(exports)"
logged "LUN 2 is gone: export 2 no longer listed"
echo "a LUN deleted is no longer listed: ok"
nbd_stop
echo PASS
