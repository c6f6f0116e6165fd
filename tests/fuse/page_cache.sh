#!/bin/bash
# --page-cache and a LUN deleted and created again under its number, with other blocks: reads
# through the kernel's page cache must return the new LUN's blocks, never the old LUN's cached
# pages. Under the session daemon's tree (login --page-cache) and under a flat mount, each in
# two cases: the new LUN has another identity (Device Identification and Unit Serial Number:
# tgtadm's scsi_id and scsi_sn), and the new LUN has tgtd's default identity, which is the old
# one's (derived from the target and the LUN number), and another capacity. A read with O_DIRECT
# meets the UNIT ATTENTION 3F/0E that tgtd raises; the page-cache reads then wait (bounded) for
# the new blocks.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp tgtadm truncate
sessions_setup
T=iqn.2026-11.test:t1
tgt_target 1 "$T"
tgt_lun 1 1 8M

# recreate SIZE DATA [ID]: LUN 1 deleted, its backing file holding DATA and SIZE bytes long, LUN 1
# created again on it; with ID, its scsi_id and scsi_sn are ID.
recreate() {
  local file
  file=$(tgt_lun_file 1 1)
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 1 || fail "deleting LUN 1"
  cp "$2" "$file"
  truncate -s "$1" "$file"
  tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$file" ||
    fail "creating LUN 1 again"
  if [ -n "${3:-}" ]; then
    tgtadm --lld iscsi --op update --mode logicalunit --tid 1 --lun 1 \
      --params "scsi_id=$3,scsi_sn=$3" || fail "setting LUN 1's identity to $3"
  fi
}

# reads FILE DATA: FILE, read through the page cache, holds DATA.
reads() {
  cmp -s -n "$(stat -c %s "$2")" "$2" "$1"
}

# check FILE NAME: both cases on FILE, LUN 1 of the target, 8 MiB when called.
check() {
  local file=$1 name=$2
  dd if=/dev/urandom of="$FUSE_DIR/a" bs=1M count=8 status=none
  dd if=/dev/urandom of="$FUSE_DIR/b" bs=1M count=8 status=none
  dd if=/dev/urandom of="$FUSE_DIR/c" bs=1M count=12 status=none
  timeout 60 dd if="$FUSE_DIR/a" of="$file" bs=1M conv=fsync,notrunc status=none ||
    fail "$name: writing pattern A"
  reads "$file" "$FUSE_DIR/a" || fail "$name: pattern A does not read back"

  recreate 8M "$FUSE_DIR/b" "$name-b"
  timeout 60 dd if="$file" of=/dev/null bs=4k count=1 iflag=direct status=none ||
    fail "$name: the O_DIRECT read after LUN 1 was created again"
  wait_for 30 reads "$file" "$FUSE_DIR/b" ||
    fail "$name: LUN 1 created again with another identity still reads as the old LUN's pages"
  echo "$name: a LUN created again with another identity reads its own blocks: ok"

  recreate 12M "$FUSE_DIR/c" "$name-b"
  timeout 60 dd if="$file" of=/dev/null bs=4k count=1 iflag=direct status=none ||
    fail "$name: the O_DIRECT read after LUN 1 was created again"
  wait_for 30 reads "$file" "$FUSE_DIR/c" ||
    fail "$name: LUN 1 created again with the same identity and another capacity still reads as the old LUN's pages"
  echo "$name: a LUN created again with its identity and another capacity reads its own blocks: ok"
  recreate 8M "$FUSE_DIR/c"
}

ic login --page-cache "$(sessions_url 1)" || fail "login --page-cache to $T"
check "$ROOT/$T/lun1" tree
ic logout --all || fail "logout --all"
sessions_assert_gone

fuse_mount "$(fuse_url 1 1)" "$MNT" --page-cache
check "$MNT/lun1" flat
fuse_unmount "$MNT"
echo PASS
