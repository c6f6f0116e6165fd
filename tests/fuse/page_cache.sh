#!/bin/bash
# --page-cache and a LUN deleted and created again under its number, with other blocks: reads
# through the kernel's page cache must return the new LUN's blocks, never the old LUN's cached
# pages. Under the session daemon's tree (login --page-cache) and under a flat mount of the
# target, each in three cases:
#   - opened after the LUN was created again with another identity (Device Identification and
#     Unit Serial Number: tgtadm's scsi_id and scsi_sn) and the same size: tgtd raises no unit
#     attention on the LUN itself, so only the open can notice (it reads the identity);
#   - opened after the LUN was created again with the same identity (tgtd's default is the
#     deleted LUN's) and another size;
#   - a descriptor opened before: once a command on the target's other LUN met the unit
#     attention 3F/0E, the flat mount drops the file's pages (the descriptor then reads the new
#     blocks) and the tree replaces the file (the descriptor fails with ENODEV, a new open reads
#     the new blocks).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp tgtadm truncate python3
sessions_setup
T=iqn.2026-11.test:t1
tgt_target 1 "$T"
tgt_lun 1 1 8M
tgt_lun 1 2 8M

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

# reads FILE DATA: FILE, opened now and read through the page cache, begins with DATA.
reads() {
  cmp -s -n "$(stat -c %s "$2")" "$2" "$1"
}

# fd_reads FD DATA [WAIT]: what descriptor FD (open in this shell) reads at offset 0 is DATA,
# or (WAIT=enodev) the read fails with ENODEV; with WAIT, tries again for up to 30 s (the LUN
# watch looks once a second), in one process: a python3 started per try takes most of that.
fd_reads() {
  python3 - "$@" <<'EOF'
import errno, os, sys, time
fd, want, wait = int(sys.argv[1]), open(sys.argv[2], "rb").read(), sys.argv[3:]
deadline = time.monotonic() + (30 if wait else 0)
while True:
    try:
        ok = os.pread(fd, len(want), 0) == want and wait != ["enodev"]
    except OSError as e:
        ok = e.errno == errno.ENODEV and wait == ["enodev"]
    if ok:
        sys.exit(0)
    if time.monotonic() >= deadline:
        sys.exit(1)
    time.sleep(0.1)
EOF
}

# write FILE DATA: DATA written to FILE through the page cache, and read back.
write() {
  timeout 60 dd if="$2" of="$1" bs=1M conv=fsync,notrunc status=none || fail "writing $1"
  reads "$1" "$2" || fail "$2 does not read back from $1"
}

# check_case DIR NAME: the three cases on DIR/lun1, LUN 1 of the target, 8 MiB when called.
check_case() {
  local dir=$1 name=$2 i
  for i in a b c d e; do
    dd if=/dev/urandom of="$FUSE_DIR/$i" bs=1M count=8 status=none
  done
  dd if=/dev/urandom of="$FUSE_DIR/c" bs=1M count=12 status=none

  write "$dir/lun1" "$FUSE_DIR/a"
  recreate 8M "$FUSE_DIR/b" "$name-b"
  reads "$dir/lun1" "$FUSE_DIR/b" ||
    fail "$name: LUN 1 created again with another identity reads the old LUN's pages"
  echo "$name: opened after the LUN was created again with another identity: its own blocks: ok"

  recreate 12M "$FUSE_DIR/c" "$name-b"
  reads "$dir/lun1" "$FUSE_DIR/c" ||
    fail "$name: LUN 1 created again with the same identity and another size reads the old LUN's pages"
  echo "$name: opened after the LUN was created again with its identity and another size: its own blocks: ok"

  recreate 8M "$FUSE_DIR/d"
  exec 3<"$dir/lun1"
  fd_reads 3 "$FUSE_DIR/d" || fail "$name: the descriptor does not read LUN 1's blocks"
  recreate 8M "$FUSE_DIR/e" "$name-e"
  # The command that meets 3F/0E: LUN 1 itself gets none.
  timeout 60 dd if="$dir/lun2" of=/dev/null bs=4k count=1 iflag=direct status=none ||
    fail "$name: reading lun2"
  if [ "$name" = tree ]; then
    fd_reads 3 "$FUSE_DIR/e" enodev ||
      fail "$name: the descriptor opened on the old LUN 1 does not fail with ENODEV"
    reads "$dir/lun1" "$FUSE_DIR/e" || fail "$name: the replaced lun1 does not read the new LUN's blocks"
    echo "$name: a descriptor opened before the LUN was created again fails with ENODEV: ok"
  else
    fd_reads 3 "$FUSE_DIR/e" wait ||
      fail "$name: a descriptor opened before LUN 1 was created again still reads the old LUN's pages"
    echo "$name: a descriptor opened before the LUN was created again reads its new blocks: ok"
  fi
  exec 3<&-
}

ic login --page-cache "$(sessions_url 1)" || fail "login --page-cache to $T"
check_case "$ROOT/$T" tree
ic logout --all || fail "logout --all"
sessions_assert_gone

fuse_mount "$(fuse_url 1)" "$MNT" --page-cache
check_case "$MNT" flat
fuse_unmount "$MNT"
echo PASS
