#!/bin/bash
# On a thin LUN: fallocate --punch-hole deallocates (the backing file shrinks), the hole reads as
# zeroes and SEEK_HOLE/SEEK_DATA find it; fallocate --zero-range zeroes an unaligned range.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires fallocate du
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 32M --params thin_provisioning=1
BACKING=$(tgt_lun_file 1 1)
fuse_mount "$(fuse_url 1 1)" "$MNT"
F=$MNT/lun1
timeout 60 dd if=/dev/urandom of="$F" bs=1M count=32 conv=fsync,notrunc status=none
before=$(du -k "$BACKING" | cut -f1)
timeout 60 fallocate --punch-hole --offset 4M --length 8M "$F" || fail "fallocate --punch-hole"
after=$(du -k "$BACKING" | cut -f1)
[ "$after" -le $((before - 8192)) ] || fail "backing file did not shrink: $before KiB -> $after KiB"
python3 - "$F" <<'PY' || fail "SEEK_HOLE/SEEK_DATA"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
M = 1 << 20
hole = os.lseek(fd, 0, os.SEEK_HOLE)
data = os.lseek(fd, 4 * M, os.SEEK_DATA)
assert hole == 4 * M, "SEEK_HOLE from 0 gave %d" % hole
assert data == 12 * M, "SEEK_DATA from 4 MiB gave %d" % data
assert os.lseek(fd, 13 * M, os.SEEK_HOLE) == 32 * M, "no virtual hole at the end"
try:
    os.lseek(fd, 32 * M, os.SEEK_DATA)
    raise AssertionError("SEEK_DATA past the end succeeded")
except OSError as e:
    assert e.errno == 6, e  # ENXIO
assert os.pread(fd, 8 * M, 4 * M) == bytes(8 * M), "the hole does not read as zeroes"
print("hole at", hole, "data again at", data)
PY
timeout 60 fallocate --zero-range --offset 100 --length 70000 "$F" || fail "fallocate --zero-range"
python3 - "$F" "$BACKING" <<'PY' || fail "zero range"
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    assert os.pread(fd, 70000, 100) == bytes(70000), path
    assert os.pread(fd, 100, 0) != bytes(100), "zeroed before the range"
PY
fuse_unmount "$MNT"
echo "thin: ok"
