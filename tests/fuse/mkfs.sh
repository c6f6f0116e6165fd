#!/bin/bash
# A file system on the LUN file: mkfs.ext4 -F, then e2fsck -fn finds it clean, also after a
# remount (the data reached the target).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires mkfs.ext4 e2fsck
fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 256M
fuse_mount "$(fuse_url 1 1)" "$MNT"
timeout 120 mkfs.ext4 -q -F "$MNT/lun1" || fail "mkfs.ext4"
timeout 120 e2fsck -fn "$MNT/lun1" || fail "e2fsck after mkfs"
fuse_unmount "$MNT"
fuse_mount "$(fuse_url 1 1)" "$MNT"
timeout 120 e2fsck -fn "$MNT/lun1" || fail "e2fsck after remount"
fuse_unmount "$MNT"
timeout 120 e2fsck -fn "$(tgt_lun_file 1 1)" || fail "e2fsck on the backing file"
echo "mkfs + e2fsck: ok"
