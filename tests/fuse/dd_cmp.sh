#!/bin/bash
# dd a random image into a LUN file (buffered and O_DIRECT, conv=fsync), compare it with the
# target's backing file and read it back through the mount; unaligned writes and reads at odd
# offsets; the same with --page-cache.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires dd cmp
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 64M
BACKING=$(tgt_lun_file 1 1)
IMG=$FUSE_DIR/img
dd if=/dev/urandom of="$IMG" bs=1M count=48 status=none

check_image() {  # check_image FILE: the first 48 MiB of the LUN, seen two ways, equal $IMG
  cmp -n $((48 << 20)) "$IMG" "$BACKING" || fail "backing file differs from the image written"
  timeout 60 dd if="$1" of="$FUSE_DIR/back" bs=1M count=48 iflag=direct status=none
  cmp "$IMG" "$FUSE_DIR/back" || fail "read back through the mount differs"
}

fuse_mount "$(fuse_url 1 1)" "$MNT"
F=$MNT/lun1
# Buffered; no conv=notrunc on purpose: O_TRUNC is ignored as on a block device.
timeout 60 dd if="$IMG" of="$F" bs=1M conv=fsync status=none || fail "buffered dd"
[ "$(stat -c %s "$F")" = $((64 << 20)) ] || fail "size changed after dd"
check_image "$F"
echo "buffered dd: ok"

dd if=/dev/urandom of="$IMG" bs=1M count=48 status=none
timeout 60 dd if="$IMG" of="$F" bs=1M oflag=direct conv=fsync,notrunc status=none || fail "O_DIRECT dd"
check_image "$F"
echo "O_DIRECT dd: ok"

# Odd offsets and lengths, crossing block boundaries, compared with the backing file.
python3 - "$F" "$BACKING" <<'PY' || fail "unaligned I/O"
import os, random, sys
f, backing = sys.argv[1], sys.argv[2]
rnd = random.Random(7)
fd = os.open(f, os.O_RDWR)
for _ in range(200):
    off = rnd.randrange(0, (64 << 20) - 200000)
    data = os.urandom(rnd.randrange(1, 200000))
    assert os.pwrite(fd, data, off) == len(data)
    assert os.pread(fd, len(data), off) == data, "read back at %d" % off
os.fsync(fd)
os.close(fd)
with open(f, "rb") as a, open(backing, "rb") as b:
    while True:
        x, y = a.read(1 << 20), b.read(1 << 20)
        assert x == y, "mount and backing file differ"
        if not x:
            break
PY
echo "unaligned I/O: ok"
fuse_unmount "$MNT"

fuse_mount "$(fuse_url 1 1)" "$MNT" --page-cache
dd if=/dev/urandom of="$IMG" bs=1M count=48 status=none
timeout 60 dd if="$IMG" of="$F" bs=1M conv=fsync status=none || fail "page-cache dd"
check_image "$F"
cmp -n $((48 << 20)) "$IMG" "$F" || fail "page-cache buffered read differs"
fuse_unmount "$MNT"
echo "page cache dd: ok"
