#!/bin/bash
# One session table for every process of a user that holds sessions (docs/sessions.md): a
# single-target mount is listed by `session` beside the session daemon's tree, with its mount
# point; a login of the target the mount holds is "session exists" (15) naming the mount, and
# starts nothing; `logout -T` of the mount's target ends the mount (flushed, unmounted, its process
# and state gone) and says which tree each line was about; a mount of a target the daemon holds is
# 15 unless --new-session; `logout --all` reaches the rest.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 32M
tgt_target 2 "$T2"
tgt_lun 2 1 16M

fuse_mount "$(sessions_url 1)" "$MNT"
MOUNT_PID=$FUSE_PID
ic login "$(sessions_url 2)" || fail "login to $T2"

out=$(ic session) || fail "session: $out"
grep -q "^tcp: \[[0-9]*\] 127.0.0.1:$TGT_PORT,1 $T1 (non-flash)$" <<<"$out" || fail "the mount is not listed: $out"
out=$(ic session -P 1) || fail "session -P 1: $out"
grep -qF "Files: $MNT/lun1" <<<"$out" || fail "the mount's file is not listed: $out"
grep -qF "Held by: mount $MNT (pid " <<<"$out" || fail "the mount is not named: $out"
out=$(ic session) || fail "session: $out"
grep -q "^tcp: \[[0-9]*\] 127.0.0.1:$TGT_PORT,1 $T2 (non-flash)$" <<<"$out" || fail "the daemon's session is not listed: $out"
ic session --json | python3 -c '
import json, sys
mnt, root, pid, t1, t2 = sys.argv[1:]
by_target = {s["target"]: s for s in json.load(sys.stdin)}
assert set(by_target) == {t1, t2}, by_target
m, d = by_target[t1], by_target[t2]
assert (m["root"], m["pid"], m["kind"]) == (mnt, int(pid), "mount"), m
assert m["files"] == [mnt + "/lun1"], m
assert (d["root"], d["kind"]) == (root, "daemon"), d
' "$MNT" "$ROOT" "$MOUNT_PID" "$T1" "$T2" || fail "session --json"
echo "session lists the single-target mount and the daemon's tree: ok"

# The mount holds T1: a login of T1 starts no second session anywhere.
expect_exit 15 "already logged in to $T1 in $MNT" "$ISER_CONNECT" login "$(sessions_url 1)"
[ ! -e "$ROOT/$T1" ] || fail "a second session to $T1 was made in the daemon's tree"
[ "$(tgtadm --lld iscsi --op show --mode target | awk '/^Target 1:/{t=1} /^Target 2:/{t=0} t' |
  grep -c 'I_T nexus: [0-9]')" = 1 ] || fail "target 1 has more than one session"
echo "login of a target a mount holds: exit 15: ok"

# Data written through the mount is on the LUN once the logout returns (flushed, then logged out).
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=8 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$MNT/lun1" bs=1M conv=notrunc status=none
out=$(ic logout -T "$T1") || fail "logout -T $T1: $out"
[ "$out" = "Logout of [target: $T1] successful: $MNT" ] || fail "logout -T said: $out"
wait_for 20 fuse_unmounted "$MNT" || fail "$MNT is still mounted after the logout"
process_gone() { ! kill -0 "$1" 2>/dev/null; }
wait_for 20 process_gone "$MOUNT_PID" || fail "the mount's process $MOUNT_PID still runs"
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 1 1)" || fail "data written through the mount"
[ -f "$ROOT/$T2/lun1" ] || fail "the logout of $T1 touched the daemon's tree"
echo "logout -T of the mount's target ends the mount: ok"

# The other way round: `iser-connect mount` of the target the daemon holds is 15 naming the tree
# and mounts nothing; --new-session mounts it with a second session (two I_T nexuses), which
# `session` lists with a SID of its own and `logout -r SID` ends alone. A tree holds one session
# per target, --new-session or not.
MNT2=$FUSE_DIR/mnt2
mkdir "$MNT2"
expect_exit 15 "already logged in to $T2 in $ROOT" "$ISER_CONNECT" mount "$(sessions_url 2)" "$MNT2"
! fuse_mounted "$MNT2" fuse.iser-connect || fail "$MNT2 was mounted though $T2 is held"
FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
fuse_mount "$(sessions_url 2)" "$MNT2" --new-session
MOUNT2_PID=$FUSE_PID
[ "$(tgtadm --lld iscsi --op show --mode target | awk '/^Target 2:/{t=1} t' |
  grep -c 'I_T nexus: [0-9]')" = 2 ] || fail "target 2 has not two sessions"
out=$(ic session) || fail "session: $out"
[ "$(grep -c " $T2 (non-flash)$" <<<"$out")" = 2 ] || fail "session does not list both: $out"
SID2=$(ic session --json | python3 -c '
import json, sys
mnt = sys.argv[1]
print(*[s["sid"] for s in json.load(sys.stdin) if s["root"] == mnt])' "$MNT2")
expect_exit 15 "a tree holds one session per target" "$ISER_CONNECT" login --new-session "$(sessions_url 2)"
out=$(ic logout -r "$SID2") || fail "logout -r $SID2: $out"
[ "$out" = "Logout of [target: $T2] successful: $MNT2" ] || fail "logout -r $SID2 said: $out"
wait_for 20 process_gone "$MOUNT2_PID" || fail "the second mount's process still runs"
[ -f "$ROOT/$T2/lun1" ] || fail "the logout of the second session touched the daemon's tree"
echo "a mount of a held target is 15; --new-session makes a second session: ok"

out=$(ic logout --all) || fail "logout --all: $out"
[ "$out" = "Logout of [target: $T2] successful: $ROOT" ] || fail "logout --all said: $out"
sessions_assert_gone
echo "logout --all: ok"

# A mount killed with SIGKILL (its unmount guard unmounts it): `session` says its state is left and
# that the next mount there replaces it (a login would not: it is not the daemon's tree); the next
# mount there does.
fuse_mount "$(sessions_url 1)" "$MNT"
KILLED=$FUSE_PID
kill -9 "$KILLED"
wait_for 20 process_gone "$KILLED" || fail "the mount $KILLED survived SIGKILL"
wait_for 20 fuse_unmounted "$MNT" || fail "the unmount guard left $MNT mounted"
expect_exit 21 "the process that served $MNT \\(pid $KILLED\\) is gone and left its state behind: the next mount there replaces its state" \
  "$ISER_CONNECT" session
fuse_mount "$(sessions_url 1)" "$MNT"
ic session | grep -q " $T1 (non-flash)$" || fail "the new mount is not listed: $(ic session)"
fuse_unmount "$MNT"
sessions_assert_gone
echo "a killed mount: session names what cleans up after it: ok"
checks_done
