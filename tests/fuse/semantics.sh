#!/bin/bash
# File semantics of a LUN file: exact sizes for every LUN of a target (the controller LUN 0 is not
# shown), a LUN URL shows one file, st_blksize is the physical block, fixed size (truncate and
# create refused with EPERM), writes past the end fail with ENOSPC, O_DSYNC writes and fsync work,
# a read-only LUN is read-only; `iser-connect mount` (the CLI) mounts the same files.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 64M
tgt_lun 1 2 10M --blocksize=4096
tgt_lun 1 3 3M
tgt_target 2 iqn.2026-11.test:t2
tgt_lun 2 1 8M --params readonly=1

fuse_mount "$(fuse_url 1)" "$MNT"
listing=$(cd "$MNT" && stat -c '%n %s %B %o' -- *)
echo "$listing"
[ "$(echo "$listing" | awk '{print $1, $2}' | tr '\n' ' ')" = \
  "lun1 67108864 lun2 10485760 lun3 3145728 " ] || fail "wrong files or sizes: $listing"
[ "$(stat -c %o "$MNT/lun2")" = 4096 ] || fail "st_blksize of a 4096-byte-block LUN"
fuse_unmount "$MNT"

fuse_mount "$(fuse_url 1 2)" "$MNT"
[ "$(ls "$MNT")" = lun2 ] || fail "a LUN URL must show one file: $(ls "$MNT")"
F=$MNT/lun2
! truncate -s 1M "$F" 2>"$FUSE_DIR/err" || fail "truncate succeeded"
grep -q "not permitted" "$FUSE_DIR/err" || fail "truncate: $(cat "$FUSE_DIR/err")"
truncate -s 10M "$F" || fail "truncate to the same size must succeed"
! touch "$MNT/new" 2>/dev/null || fail "creating a file succeeded"
! rm -f "$F" 2>/dev/null || fail "removing a LUN file succeeded"
python3 - "$F" <<'PY' || fail "O_DSYNC, fsync, end of file"
import errno, os, sys
size = 10 << 20
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DSYNC)
assert os.pwrite(fd, b"x" * 5000, 12345) == 5000
os.fsync(fd)
os.fdatasync(fd)
assert os.pwrite(fd, b"y" * 100, size - 10) == 10, "a write across the end is cut at the end"
try:
    os.pwrite(fd, b"z", size)
    raise AssertionError("a write at the end succeeded")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
assert os.pread(fd, 100, size - 10) == b"y" * 10
assert os.pread(fd, 100, size) == b""
PY
fuse_unmount "$MNT"
echo "fixed size, O_DSYNC, fsync: ok"

fuse_mount "$(fuse_url 2)" "$MNT"
[ "$(stat -c %a "$MNT/lun1")" = 444 ] || fail "read-only LUN mode $(stat -c %a "$MNT/lun1")"
grep -qs " $MNT fuse.iser-connect ro," /proc/mounts || fail "all-read-only mount not ro"
! dd if=/dev/zero of="$MNT/lun1" bs=4k count=1 conv=notrunc 2>/dev/null || fail "wrote a read-only LUN"
cmp -n $((8 << 20)) "$MNT/lun1" "$(tgt_lun_file 2 1)" || fail "read of a read-only LUN"
fuse_unmount "$MNT"
echo "read-only LUN: ok"

# The same through the CLI, `iser-connect mount`, with its global options.
[ -x "${ISER_CONNECT:-}" ] || fail "ISER_CONNECT must name the iser-connect binary"
FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
fuse_mount "$(fuse_url 1)" "$MNT" -i iqn.2026-11.test:fuse-cli
listing=$(cd "$MNT" && stat -c '%n %s' -- * | tr '\n' ' ')
[ "$listing" = "lun1 67108864 lun2 10485760 lun3 3145728 " ] || fail "iser-connect mount shows: $listing"
tgtadm --lld iscsi --op show --mode target | grep -q "Initiator: iqn.2026-11.test:fuse-cli" ||
  fail "iser-connect mount did not log in with -i's initiator name"
head -c 1M /dev/urandom >"$FUSE_DIR/img"
dd if="$FUSE_DIR/img" of="$MNT/lun3" bs=256k oflag=direct conv=notrunc,fsync status=none ||
  fail "write through iser-connect mount"
cmp -n $((1 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 1 3)" || fail "data written through iser-connect mount"
fuse_unmount "$MNT"
fuse_assert_logged_out
echo "iser-connect mount: ok"
