#!/bin/bash
# Options mean what they say (docs/sessions.md, "Options of a login"): read-only is each target's
# own, also for a login into a running daemon (before, `login -r` into a running daemon printed
# success and the file was writable); a second login of a held target with other options is
# "session exists" (15) naming the difference; options that are the whole tree's (page cache,
# allow_other, threads) differing from the running daemon's are refused (7) with the reason,
# never dropped.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 16M
tgt_target 2 "$T2"
tgt_lun 2 1 16M

ic login "$(sessions_url 1)" || fail "login to $T1"
ic login -r "$(sessions_url 2)" || fail "login -r to $T2 into the running daemon"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=4 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/$T1/lun1" bs=1M conv=fsync,notrunc status=none ||
  fail "writing $T1, logged in read-write"
cmp -n $((4 << 20)) "$FUSE_DIR/img" "$ROOT/$T1/lun1" || fail "$T1 reads back"
before=$(md5sum <"$(tgt_lun_file 2 1)")
if timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/$T2/lun1" bs=1M conv=notrunc status=none 2>"$FUSE_DIR/err"; then
  fail "a write to $T2, logged in with -r, succeeded"
fi
grep -q "Read-only file system" "$FUSE_DIR/err" || fail "the write to $T2 failed otherwise: $(cat "$FUSE_DIR/err")"
[ "$(md5sum <"$(tgt_lun_file 2 1)")" = "$before" ] || fail "the LUN of $T2 changed"
[ "$(stat -c %a "$ROOT/$T2/lun1")" = 444 ] || fail "$T2/lun1 has mode $(stat -c %a "$ROOT/$T2/lun1")"
[ "$(stat -c %a "$ROOT/$T1/lun1")" = 644 ] || fail "$T1/lun1 has mode $(stat -c %a "$ROOT/$T1/lun1")"
timeout 60 dd if="$ROOT/$T2/lun1" of=/dev/null bs=1M count=4 status=none || fail "reading $T2"
ic session --json | python3 -c '
import json, sys
d = {s["target"]: s["read_only"] for s in json.load(sys.stdin)}
assert d == {sys.argv[1]: False, sys.argv[2]: True}, d
' "$T1" "$T2" || fail "session --json does not say which target is read-only"
echo "login -r into a running daemon: that target alone is read-only: ok"

expect_exit 15 "already logged in to $T1 in $ROOT, read-write; log out of it first to log in read-only" \
  "$ISER_CONNECT" login -r "$(sessions_url 1)"
expect_exit 15 "already logged in to $T2 in $ROOT, read-only; log out of it first to log in read-write" \
  "$ISER_CONNECT" login "$(sessions_url 2)"
echo "a second login with other options: exit 15 naming the difference: ok"

tgt_target 3 iqn.2026-11.test:t3
tgt_lun 3 1 8M
expect_exit 7 "runs with the page cache off, this login asks for it on" \
  "$ISER_CONNECT" login --page-cache "$(sessions_url 3)"
expect_exit 7 "runs 64 FUSE threads, this login asks for 8" \
  "$ISER_CONNECT" login --threads 8 "$(sessions_url 3)"
expect_exit 7 "runs with allow_other off" "$ISER_CONNECT" login --allow-other "$(sessions_url 3)"
[ ! -e "$ROOT/iqn.2026-11.test:t3" ] || fail "a refused login added its target"
ic login --threads 64 "$(sessions_url 3)" || fail "login with the daemon's own thread count"
echo "options of the whole tree that differ: exit 7, nothing dropped: ok"

ic logout --all || fail "logout --all"
sessions_assert_gone
checks_done
