#!/bin/bash
# A file system survives target restarts: ext4 made on the LUN file of an `iser-connect mount`,
# mounted with fuse2fs (user-space ext4), written by a file workload (files of known content,
# each written under a temporary name, fsynced and renamed into place) while tgtd is SIGKILLed
# and started again 4 times. The workload sees no error; after fuse2fs is unmounted, e2fsck -fn
# finds the file system clean (through the mount and in the backing file) and every file has
# the content last written.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
requires mkfs.ext4 e2fsck fuse2fs fusermount
recovery_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 128M
recovery_mount "$WORK/mount.log" "iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t1/1"
LUN=$MNT/lun1
timeout 60 mkfs.ext4 -q -F "$LUN" || fail "mkfs.ext4"

FS=$WORK/fs
mkdir "$FS" "$WORK/src"
# fuse2fs_mount [options]: fuse2fs in the foreground (in the background here), log in WORK.
fuse2fs_mount() {
  fuse2fs "$LUN" "$FS" -f -o fakeroot "$@" 2>>"$WORK/fuse2fs.log" &
  FUSE2FS_PID=$!
  wait_for --pid "$FUSE2FS_PID" 30 fuse_mounted "$FS" || fail "fuse2fs did not mount $LUN"
}
# At exit, fuse2fs goes before the mount it reads from.
fuse2fs_cleanup() {
  if fuse_mounted "$FS"; then fusermount -u "$FS" 2>/dev/null || umount -l "$FS" || true; fi
  [ -z "$FUSE2FS_PID" ] || kill -9 "$FUSE2FS_PID" 2>/dev/null || true
}
fuse2fs_unmount() {
  fusermount -u "$FS" || fail "fusermount -u $FS"
  wait_for 60 exited "$FUSE2FS_PID" || fail "fuse2fs still running 60 s after unmount"
  wait "$FUSE2FS_PID" || fail "fuse2fs exited non-zero: $(cat "$WORK/fuse2fs.log")"
}
# Files f0..f15 in 4 directories, rewritten in turn (bounded space) until $WORK/stop appears;
# $WORK/src holds what each one must contain.
FILES=16
workload() {
  local i=0 k dir size
  mkdir "$FS/d0" "$FS/d1" "$FS/d2" "$FS/d3"
  while [ ! -e "$WORK/stop" ]; do
    k=$((i % FILES))
    dir=$FS/d$((k % 4))
    size=$((4096 + RANDOM * 8))
    head -c $size /dev/urandom >"$WORK/src/f$k.new"
    cp "$WORK/src/f$k.new" "$dir/f$k.tmp"
    sync "$dir/f$k.tmp"
    mv "$dir/f$k.tmp" "$dir/f$k"
    sync "$dir"
    mv "$WORK/src/f$k.new" "$WORK/src/f$k"
    i=$((i + 1))
    sleep 0.02
  done
  echo "workload: $i files written"
}
written() { find "$WORK/src" -name 'f*' ! -name '*.new' | wc -l; }
all_written() { [ "$(written)" -eq $FILES ]; }

RECOVERY_LOGS+=("$WORK/fuse2fs.log")
FUSE2FS_PID=
cleanup_push fuse2fs_cleanup
fuse2fs_mount
workload &
workload_pid=$!
recovery_background $workload_pid
recovery_restarts $workload_pid 4 "$WORK/mount.log"
wait_for 60 all_written || fail "only $(written) of $FILES files written in time"
touch "$WORK/stop"
wait $workload_pid || fail "the file workload failed"
fuse2fs_unmount

timeout 120 e2fsck -fn "$LUN" || fail "e2fsck -fn through the mount"
timeout 120 e2fsck -fn "$(tgt_lun_file 1 1)" || fail "e2fsck -fn on the backing file"
echo "e2fsck: clean"
fuse2fs_mount -o ro
n=0
for src in "$WORK/src"/f*; do
  k=${src##*/f}
  cmp "$src" "$FS/d$((k % 4))/f$k" || fail "f$k differs from what was last written"
  n=$((n + 1))
done
[ $n -eq $FILES ] || fail "$n files instead of $FILES"
echo "$n files: content as last written"
fuse2fs_unmount
recovery_unmount
echo PASS
