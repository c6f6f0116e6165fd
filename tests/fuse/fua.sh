#!/bin/bash
# Durability on the wire: a write on an O_DSYNC descriptor and a pwritev2(RWF_DSYNC) write reach
# the target as WRITEs with the FUA bit (a SYNCHRONIZE CACHE after each where the LUN has no
# DPOFUA), a plain write goes without it, and fsync sends SYNCHRONIZE CACHE. Checked in a tshark
# capture of the iSCSI traffic, which must dissect cleanly; the data must be in the backing file.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../harness/capture.sh"
requires tshark
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 64M

# Foreground and verbose, so that the LUN's capabilities are in the log.
fuse_mount_foreground "$FUSE_DIR/log" "$(fuse_url 1 1)" "$MNT" -v
[ -f "$MNT/lun1" ] || fail "no lun1 in the mount"
grep -q "lun1: .*write cache" "$FUSE_DIR/log" || fail "no write cache on the LUN: nothing to test"

capture_start "$TGT_PORT" "$FUSE_DIR"
# LBAs (512-byte blocks): O_DSYNC at 2048, plain at 4096, RWF_DSYNC at 6144, then fsync.
python3 - "$MNT/lun1" <<'PY' || fail "writes"
import os, sys
block = 64 << 10
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DSYNC)
assert os.pwrite(fd, b"\x11" * block, 1 << 20) == block
os.close(fd)
fd = os.open(sys.argv[1], os.O_RDWR)
assert os.pwrite(fd, b"\x22" * block, 2 << 20) == block
assert os.pwritev(fd, [b"\x33" * block], 3 << 20, os.RWF_DSYNC) == block
os.fsync(fd)
os.close(fd)
PY
capture_stop

capture_assert_clean
writes=$(capture_commands "$CAPTURE_WRITE")
[ "$writes" -eq 3 ] || fail "expected 3 WRITE commands on the wire, saw $writes"
dpofua=no
grep -q "lun1: .*FUA" "$FUSE_DIR/log" && dpofua=yes
capture_expect_durability $dpofua "2048 6144" 1  # fsync

backing=$(tgt_lun_file 1 1)
for step in "16 \\021" "32 \\042" "48 \\063"; do
  set -- $step
  cmp <(dd if="$backing" bs=64k skip="$1" count=1 status=none) \
    <(head -c 64k /dev/zero | tr '\0' "$2") || fail "the write at 64 KiB block $1 is not in the backing file"
done

fusermount3 -u "$MNT" || fail "fusermount3 -u"
wait "$FUSE_PID" || fail "the mount exited non-zero: $(tail -5 "$FUSE_DIR/log")"
fuse_assert_logged_out
echo "O_DSYNC and RWF_DSYNC writes carry FUA, fsync is SYNCHRONIZE CACHE: ok"
