#!/bin/bash
# mount_helper.sh: mount(8) and fstab mount the LUNs through the fuse.iser-connect helper, as
# docs/fstab.md describes. `mount -t fuse.iser-connect URL DIR -o ro,_netdev`: the LUN file is
# read-only and equal to its backing file; `umount DIR` ends the serving process. The same target
# from a temporary fstab (`mount --fstab FILE DIR`), rw with the generic fstab options and a
# session option: data written through the file reaches the backing file. Then util-linux's
# direct route, /sbin/mount.fuse.iser-connect. An unknown option fails naming it, exit 7, and
# mounts nothing; so does a secret in the options.
#
# util-linux runs helpers without PATH, so mount.fuse3 finds `iser-connect` only in the shell's
# default PATH. The test runs in a private mount namespace where /usr/local/sbin (first in that
# PATH, empty on the build machines) is a directory holding a link to the iser-connect under
# test; nothing outside the namespace sees it. ISER_CONNECT is that binary (CTest passes it).
set -euo pipefail
if [ "${ISER_MOUNT_HELPER_NS:-}" != 1 ]; then
  exec env ISER_MOUNT_HELPER_NS=1 unshare --mount --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
requires mount umount cmp dd /sbin/mount.fuse3
[ -x "${ISER_CONNECT:-}" ] || fail "ISER_CONNECT must name the iser-connect binary"

fuse_setup
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 8M
head -c 8M /dev/urandom | dd of="$(tgt_lun_file 1 1)" conv=notrunc status=none
temp_dir WORK helper
mkdir "$WORK/bin"
ln -s "$(readlink -f "$ISER_CONNECT")" "$WORK/bin/iser-connect"
mount --bind "$WORK/bin" /usr/local/sbin

# serving_pids: the iser-connect processes serving $MNT (the mount and its UnmountGuard), found
# by their program name and arguments.
serving_pids() {
  local pid prog args
  while read -r pid prog args; do
    case "${prog##*/}" in
      iser-connect | mount.fuse.iser-connect) [[ " $args " == *" $MNT "* ]] && echo "$pid" ;;
    esac
  done < <(ps -eo pid=,args=)
  return 0
}
none_serving() { [ -z "$(serving_pids)" ]; }

# mount_fuse COMMAND...: runs the mount command; then $MNT must be a fuse.iser-connect mount
# served by iser-connect processes (which the cleanup kills should the test fail).
mount_fuse() {
  FUSE_MOUNTS+=("$MNT")
  timeout 60 "$@" || fail "$* failed"
  fuse_mounted "$MNT" fuse.iser-connect || fail "$MNT is not a fuse.iser-connect mount"
  local pids
  pids=$(serving_pids)
  [ -n "$pids" ] || fail "no iser-connect process serves $MNT"
  FUSE_PIDS+=($pids)
  grep -F " $MNT " /proc/mounts
}

# umount_and_check: umount(8) ends the mount, every process serving it and the session.
umount_and_check() {
  umount "$MNT" || fail "umount $MNT"
  wait_for 20 none_serving || fail "iser-connect still serves $MNT: $(serving_pids)"
  fuse_assert_unmounted "$MNT"
  wait_for 10 fuse_assert_logged_out
}

# 1. mount -t, read-only.
mount_fuse mount -t fuse.iser-connect "$(fuse_url 1)" "$MNT" -o ro,_netdev
grep -F " $MNT " /proc/mounts | grep -q " ro," || fail "the mount is not read-only"
cmp "$MNT/lun1" "$(tgt_lun_file 1 1)" || fail "lun1 differs from the backing file"
if dd if=/dev/zero of="$MNT/lun1" bs=4k count=1 conv=notrunc status=none 2>/dev/null; then
  fail "a write to the read-only mount succeeded"
fi
echo "mount -t fuse.iser-connect -o ro,_netdev: read-only, equal to the backing file"
umount_and_check

# 2. From an fstab line, read-write, with fstab's usual options and a session option.
cat >"$WORK/fstab" <<FSTAB
# a comment, then the line docs/fstab.md shows
$(fuse_url 1) $MNT fuse.iser-connect rw,_netdev,nofail,x-systemd.automount,replacement_timeout=30 0 0
FSTAB
mount_fuse mount --fstab "$WORK/fstab" "$MNT"
grep -F " $MNT " /proc/mounts | grep -q " rw," || fail "the fstab mount is not read-write"
head -c 1M /dev/urandom >"$WORK/data"
dd if="$WORK/data" of="$MNT/lun1" bs=64k seek=16 conv=notrunc,fsync status=none ||
  fail "write through the fstab mount"
cmp -n 1048576 "$WORK/data" <(tail -c +$((1024 * 1024 + 1)) "$(tgt_lun_file 1 1)") ||
  fail "the backing file does not hold the data written"
echo "mount --fstab, rw: data written reached the backing file"
umount_and_check

# 3. util-linux's own route: /sbin/mount.fuse.iser-connect, run without mount.fuse3 (here an
# overlay on /usr/sbin, in this namespace only, adds the build tree's link).
grep -qw overlay /proc/filesystems || fail "no overlay file system to put the link in /usr/sbin"
mkdir "$WORK/sbin"
ln -s "$(dirname "$ISER_CONNECT")/mount.fuse.iser-connect" "$WORK/sbin/"
mount -t overlay overlay -o "lowerdir=$WORK/sbin:/usr/sbin" /usr/sbin
mount_fuse mount -t fuse.iser-connect "$(fuse_url 1)" "$MNT" -o ro,_netdev
for pid in $(serving_pids); do
  [ "$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -1)" = /sbin/mount.fuse.iser-connect ] ||
    fail "process $pid was not started as /sbin/mount.fuse.iser-connect"
done
cmp "$MNT/lun1" "$(tgt_lun_file 1 1)" || fail "lun1 differs from the backing file"
echo "mount through /sbin/mount.fuse.iser-connect: equal to the backing file"
umount_and_check

# 4. Refused options: the helper exits 7 naming the option (never echoing a secret), and mount
# fails with nothing mounted. Also through the mount.fuse.iser-connect link util-linux runs.
# expect_refused COMMAND...: COMMAND exits 7 and mounts nothing; its output is left in $out.
expect_refused() {
  local rc=0
  out=$("$@" 2>&1) || rc=$?
  echo "$*: exit $rc: $out"
  [ "$rc" = 7 ] || fail "$*: exit $rc, expected 7"
  fuse_assert_unmounted "$MNT"
}
expect_refused "$ISER_CONNECT" "$(fuse_url 1)" "$MNT" -o ro,bogus_option
grep -q "unknown mount option 'bogus_option'" <<<"$out" || fail "the refusal does not name it"
expect_refused "$(dirname "$ISER_CONNECT")/mount.fuse.iser-connect" "$(fuse_url 1)" "$MNT" \
  -o rw,password=hunter2 -t fuse.iser-connect
! grep -q hunter2 <<<"$out" || fail "the secret was echoed"
rc=0
out=$(timeout 60 mount -t fuse.iser-connect "$(fuse_url 1)" "$MNT" -o ro,sync 2>&1) || rc=$?
echo "mount -o ro,sync: exit $rc: $out"
# mount(8) exits with its helper's status.
[ "$rc" = 7 ] && grep -q "unknown mount option 'sync'" <<<"$out" || fail "mount -o ro,sync"
fuse_assert_unmounted "$MNT"
echo PASS
