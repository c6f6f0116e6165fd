#!/bin/bash
# LUNs that change under a live tree, first under the session daemon's tree (login), then under a
# whole-portal mount; last, a LUN resized under a flat mount. tgtd 1.0.85 raises UNIT ATTENTION
# 3F/0E (reported LUNs data has changed) on every session of a target when a LUN is added or
# deleted, and delivers it with the session's next command on a LUN. It never raises 2A/09 and
# keeps the size a LUN had when it was created (truncating the backing file changes nothing it
# reports), so a LUN is resized by deleting it and creating it again on the resized backing file:
# a 3F/0E too. Checked here:
#   - a LUN added appears as lun<N> once a read on the target has met the UNIT ATTENTION, and
#     carries data to its backing file;
#   - a LUN grown shows its new size in stat, and reading and writing past its old end work;
#   - a LUN shrunk shows its new size, a read past its new end is end-of-file and a write there
#     fails: stat and I/O use one size;
#   - a LUN deleted disappears, and a descriptor still open on it fails with ENODEV;
#   - `session --rescan` does all this at once, without waiting for a command to meet the UA.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp stat truncate tgtadm
sessions_setup
T=iqn.2026-11.test:t1

# relun LUN SIZE: tgtd's resize: the LUN deleted, its backing file resized, the LUN created again.
relun() {
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun "$1" || fail "deleting LUN $1"
  truncate -s "$2" "$(tgt_lun_file 1 "$1")"
  tgtadm --lld iscsi --op new --mode logicalunit --tid 1 --lun "$1" -b "$(tgt_lun_file 1 "$1")" ||
    fail "creating LUN $1 again"
}

# poke DIR: one read on lun1, the command that meets the target's UNIT ATTENTION.
poke() {
  timeout 60 dd if="$1/lun1" of=/dev/null bs=4k count=1 iflag=direct status=none ||
    fail "reading $1/lun1"
}

size_is() { [ "$(stat -c %s "$1")" = "$2" ]; }
absent() { [ ! -e "$1/$2" ] && ! ls "$1" | grep -qxF "$2"; }

# bytes_read FILE OFFSET_MIB: how many bytes one 1 MiB read at that offset returns.
bytes_read() {
  timeout 60 dd if="$1" bs=1M skip="$2" count=1 iflag=direct status=none | wc -c
}

# check_changes DIR: every change above, on target 1 whose files are in DIR; LUN 1 is 16 MiB
# when called, and LUNs 2 and 3 do not exist.
check_changes() {
  local dir=$1 fd out
  size_is "$dir/lun1" $((16 << 20)) || fail "lun1 is $(stat -c %s "$dir/lun1") bytes, not 16 MiB"

  tgt_lun 1 2 8M
  [ -e "$dir/lun2" ] && fail "lun2 appeared before the session met the UNIT ATTENTION"
  poke "$dir"
  wait_for 30 test -f "$dir/lun2" || fail "lun2 added on the target did not appear: $(ls "$dir")"
  size_is "$dir/lun2" $((8 << 20)) || fail "lun2 is $(stat -c %s "$dir/lun2") bytes, not 8 MiB"
  dd if=/dev/urandom of="$FUSE_DIR/data" bs=1M count=2 status=none
  timeout 60 dd if="$FUSE_DIR/data" of="$dir/lun2" bs=1M conv=fsync,notrunc status=none ||
    fail "writing to the new lun2"
  cmp -n $((2 << 20)) "$FUSE_DIR/data" "$(tgt_lun_file 1 2)" || fail "data through the new lun2"
  echo "$dir: a LUN added appears: ok"

  relun 1 32M
  poke "$dir"
  wait_for 30 size_is "$dir/lun1" $((32 << 20)) ||
    fail "lun1 grown to 32 MiB shows $(stat -c %s "$dir/lun1") bytes"
  timeout 60 dd if="$FUSE_DIR/data" of="$dir/lun1" bs=1M seek=24 conv=fsync,notrunc \
    status=none || fail "writing past lun1's old end"
  cmp -n $((2 << 20)) "$FUSE_DIR/data" <(tail -c +$(((24 << 20) + 1)) "$(tgt_lun_file 1 1)") ||
    fail "data past lun1's old end, in the backing file"
  [ "$(bytes_read "$dir/lun1" 20)" = $((1 << 20)) ] || fail "a read past lun1's old end is short"
  cmp -n $((2 << 20)) "$FUSE_DIR/data" \
    <(timeout 60 dd if="$dir/lun1" bs=1M skip=24 count=2 iflag=direct status=none) ||
    fail "data past lun1's old end, read back"
  echo "$dir: a LUN grown shows its new size, and I/O past the old end works: ok"

  relun 1 8M
  poke "$dir"
  wait_for 30 size_is "$dir/lun1" $((8 << 20)) ||
    fail "lun1 shrunk to 8 MiB shows $(stat -c %s "$dir/lun1") bytes"
  [ "$(bytes_read "$dir/lun1" 12)" = 0 ] || fail "a read past lun1's new end returned data"
  if timeout 60 dd if="$FUSE_DIR/data" of="$dir/lun1" bs=1M seek=12 count=1 conv=notrunc \
    oflag=direct status=none 2>"$FUSE_DIR/err"; then
    fail "a write past lun1's new end succeeded"
  fi
  grep -q "No space left on device" "$FUSE_DIR/err" ||
    fail "a write past lun1's new end failed with: $(cat "$FUSE_DIR/err")"
  echo "$dir: a LUN shrunk shows its new size, and I/O stops at its new end: ok"

  exec {fd}<"$dir/lun2"
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 2 || fail "deleting LUN 2"
  poke "$dir"
  wait_for 30 absent "$dir" lun2 || fail "lun2 deleted on the target is still there: $(ls "$dir")"
  if timeout 60 dd bs=4k count=1 status=none <&"$fd" >/dev/null 2>"$FUSE_DIR/err"; then
    fail "a read on a descriptor of the deleted lun2 succeeded"
  fi
  exec {fd}<&-
  grep -q "No such device" "$FUSE_DIR/err" ||
    fail "the deleted lun2's descriptor failed with: $(cat "$FUSE_DIR/err")"
  echo "$dir: a LUN deleted disappears: ok"

  tgt_lun 1 3 4M
  relun 1 16M
  out=$(ic session --rescan) || fail "session --rescan: $out"
  echo "$out"
  grep -qF "new LUN $T/lun3" <<<"$out" || fail "session --rescan did not report lun3"
  [ -f "$dir/lun3" ] || fail "lun3 is missing after session --rescan: $(ls "$dir")"
  size_is "$dir/lun1" $((16 << 20)) ||
    fail "after session --rescan lun1 shows $(stat -c %s "$dir/lun1") bytes, not 16 MiB"
  tgtadm --lld iscsi --op delete --mode logicalunit --tid 1 --lun 3 || fail "deleting LUN 3"
  out=$(ic session --rescan) || fail "session --rescan: $out"
  grep -qF "LUN gone $T/lun3" <<<"$out" || fail "session --rescan did not report lun3 gone: $out"
  absent "$dir" lun3 || fail "lun3 is still there after session --rescan"
  echo "$dir: session --rescan adds, resizes and removes LUNs: ok"
}

tgt_target 1 "$T"
tgt_lun 1 1 16M

ic login "$(sessions_url 1)" || fail "login to $T"
check_changes "$ROOT/$T"
ic logout --all || fail "logout --all"
sessions_assert_gone

FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
fuse_mount "iscsi://127.0.0.1:$TGT_PORT" "$MNT"
check_changes "$MNT/$T"
fuse_unmount "$MNT"

# A flat mount keeps the LUNs it mounted, and follows their sizes.
fuse_mount "$(sessions_url 1)" "$MNT"
size_is "$MNT/lun1" $((16 << 20)) || fail "flat mount: lun1 is $(stat -c %s "$MNT/lun1") bytes"
relun 1 32M
poke "$MNT"
wait_for 30 size_is "$MNT/lun1" $((32 << 20)) ||
  fail "flat mount: lun1 grown to 32 MiB shows $(stat -c %s "$MNT/lun1") bytes"
[ "$(bytes_read "$MNT/lun1" 20)" = $((1 << 20)) ] || fail "flat mount: a read past the old end is short"
echo "flat mount: a LUN grown shows its new size, and reads past the old end work: ok"
fuse_unmount "$MNT"
echo PASS
