#!/bin/bash
# iser-connect login, session and logout with two targets over TCP: both trees of files appear
# and carry verified data; `session` (text and --json) lists both with their files and counters;
# a second login to one is "session exists" (15); `logout -T` removes only that target (a file
# still open on it then fails with ENODEV) and a new login to it serves its files at the same paths;
# `logout --all` unmounts and leaves nothing behind; a portal's URL logs in to all its targets.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 64M
tgt_target 2 "$T2"
tgt_lun 2 1 32M
tgt_lun 2 2 16M

ic login "$(sessions_url 1)" || fail "login to $T1"
ic login "$(sessions_url 2)" || fail "login to $T2"
fuse_mounted "$ROOT" fuse.iser-connect || fail "$ROOT is not mounted"
for f in "$T1/lun1" "$T2/lun1" "$T2/lun2"; do
  [ -f "$ROOT/$f" ] || fail "$ROOT/$f is missing: $(ls -R "$ROOT")"
done
[ "$(ls "$ROOT")" = "$T1"$'\n'"$T2" ] || fail "unexpected tree: $(ls "$ROOT")"
[ "$(stat -c %s "$ROOT/$T2/lun2")" = $((16 << 20)) ] || fail "size of $T2/lun2"
echo "login of two targets: ok"

# Verified data through both targets, compared with the backing files too.
dd if=/dev/urandom of="$FUSE_DIR/img1" bs=1M count=24 status=none
dd if=/dev/urandom of="$FUSE_DIR/img2" bs=1M count=12 status=none
timeout 60 dd if="$FUSE_DIR/img1" of="$ROOT/$T1/lun1" bs=1M conv=fsync,notrunc status=none
timeout 60 dd if="$FUSE_DIR/img2" of="$ROOT/$T2/lun2" bs=1M conv=fsync,notrunc status=none
cmp -n $((24 << 20)) "$FUSE_DIR/img1" "$ROOT/$T1/lun1" || fail "read back through $T1/lun1"
cmp -n $((12 << 20)) "$FUSE_DIR/img2" "$ROOT/$T2/lun2" || fail "read back through $T2/lun2"
cmp -n $((24 << 20)) "$FUSE_DIR/img1" "$(tgt_lun_file 1 1)" || fail "backing file of $T1/lun1"
cmp -n $((12 << 20)) "$FUSE_DIR/img2" "$(tgt_lun_file 2 2)" || fail "backing file of $T2/lun2"
echo "verified data through both: ok"

# iscsiadm's one line per session, in SID order; SIDs are small and distinct.
out=$(ic session) || fail "session"
echo "$out"
[ "$(wc -l <<<"$out")" = 2 ] || fail "session prints more than a line per session"
grep -q "^tcp: \[[12]\] 127.0.0.1:$TGT_PORT,1 $T1 (non-flash)$" <<<"$out" || fail "session lacks $T1"
grep -q "^tcp: \[[12]\] 127.0.0.1:$TGT_PORT,1 $T2 (non-flash)$" <<<"$out" || fail "session lacks $T2"
sid1=$(sed -n "s/^tcp: \[\([0-9]*\)\] .* $T1 (non-flash)$/\1/p" <<<"$out")
sid2=$(sed -n "s/^tcp: \[\([0-9]*\)\] .* $T2 (non-flash)$/\1/p" <<<"$out")
[ "$sid1" != "$sid2" ] || fail "both sessions have SID $sid1"
[ "$(ic session | sed -n 1p | cut -d' ' -f2)" = "[1]" ] || fail "the first line is not SID 1"
out=$(ic session -P 1) || fail "session -P 1"
echo "$out"
grep -q "^Target: $T1 (non-flash)$" <<<"$out" || fail "session -P 1 lacks $T1"
grep -q "Persistent Portal: 127.0.0.1:$TGT_PORT,1$" <<<"$out" || fail "session -P 1 lacks the portal"
grep -q "SID: $sid2$" <<<"$out" || fail "session -P 1 lacks SID $sid2"
grep -qF "$ROOT/$T2/lun2" <<<"$out" || fail "session -P 1 lacks the file $T2/lun2"
grep -qF "Held by: daemon $ROOT (pid " <<<"$out" || fail "session -P 1 does not name the tree"
grep -q "MaxBurstLength" <<<"$out" && fail "session -P 1 shows the negotiated parameters"
out=$(ic session -P 2) || fail "session -P 2"
grep -q "MaxBurstLength: [0-9]" <<<"$out" || fail "session -P 2 lacks the negotiated parameters"
mover=${ISER_CONNECT_TCP_DATAMOVER:-io_uring}
grep -qF "Connection: TCP 127.0.0.1:$TGT_PORT ($mover)" <<<"$out" ||
  fail "session -P 2 does not show the connection over $mover"
[ "$(ic session -P 3)" = "$out" ] || fail "session -P 3 differs from -P 2"
json=$(ic session --json) || fail "session --json"
python3 - "$json" "$ROOT" "$T1" "$T2" "$TGT_PORT" "$mover" <<'PY' || fail "session --json: $json"
import json, sys
doc, root, t1, t2, port, mover = json.loads(sys.argv[1]), *sys.argv[2:5], int(sys.argv[5]), sys.argv[6]
by = {s["target"]: s for s in doc}
assert sorted(by) == [t1, t2], by.keys()
assert by[t1]["files"] == [f"{root}/{t1}/lun1"], by[t1]["files"]
assert by[t2]["files"] == [f"{root}/{t2}/lun1", f"{root}/{t2}/lun2"], by[t2]["files"]
assert sorted(s["sid"] for s in doc) == [1, 2], doc
for s in doc:
    assert s["transport"] == "tcp" and s["state"] == "logged in", s
    assert s["datamover"] == mover, s
    assert s["portal"] == {"address": "127.0.0.1", "port": port, "tpgt": 1}, s
    assert s["current_portal"] == s["portal"], s
    assert s["bytes_written"] >= (12 << 20) and s["bytes_read"] >= (12 << 20), s
    assert s["commands"] > 0 and s["recoveries"] == 0, s
    assert s["parameters"]["MaxBurstLength"] > 0 and s["parameters"]["RDMAExtensions"] == "No", s
    assert s["root"] == root and s["pid"] > 0, s
PY
echo "session, -P 1/2/3, --json: ok"

expect_exit 15 "session exists" "$ISER_CONNECT" login "$(sessions_url 1)"
echo "second login: exit 15: ok"

# A descriptor still open on $T1/lun1 across its logout, by its SID.
exec 7<"$ROOT/$T1/lun1"
out=$(ic logout -r "$sid1") || fail "logout -r $sid1"
[ "$out" = "Logout of [target: $T1] successful: $ROOT" ] || fail "logout -r $sid1 printed: $out"
[ "$(ls "$ROOT")" = "$T2" ] || fail "after logout -T $T1 the tree holds: $(ls "$ROOT")"
[ ! -e "$ROOT/$T1/lun1" ] || fail "$T1/lun1 still resolves"
python3 - <<'PY' || fail "I/O on a file of a logged-out target"
import errno, os
try:
    os.pread(7, 4096, 0)
except OSError as e:
    assert e.errno == errno.ENODEV, e
else:
    raise AssertionError("read succeeded after logout")
PY
exec 7<&-
cmp -n $((12 << 20)) "$FUSE_DIR/img2" "$ROOT/$T2/lun2" || fail "$T2 after the logout of $T1"
[ "$(ic session --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] ||
  fail "session does not list one session"
# The target saw the logout: no I_T nexus on tid 1 (tgtadm prints each target's nexuses).
tgtadm --lld iscsi --op show --mode target | awk '/^Target 1:/{t=1} /^Target 2:/{t=0} t' |
  grep -q "I_T nexus: [0-9]" && fail "target 1 still has a session"
expect_exit 21 "no session matches -T iqn.2026-11.test:nope" "$ISER_CONNECT" logout -T iqn.2026-11.test:nope
expect_exit 21 "no session matches -T $T2 -r $sid1" "$ISER_CONNECT" logout -T "$T2" -r "$sid1"
expect_exit 7 "give a URL" "$ISER_CONNECT" logout
echo "logout -r: ok"

# Logged in again, the same path leads to the new session's file: the kernel dropped the entries
# it had cached for the old one (they would now lead to the old, gone inode: ENODEV).
ic login "$(sessions_url 1)" || fail "second login to $T1"
cmp -n $((24 << 20)) "$FUSE_DIR/img1" "$ROOT/$T1/lun1" || fail "$T1/lun1 after logging in again"
[ "$(ic session | grep -c "^tcp: \[$sid1\] .* $T1 (non-flash)$")" = 1 ] ||
  fail "the new session does not reuse the free SID $sid1: $(ic session)"
echo "login after logout: ok"

# logout as login is given: a URL, then a portal (the last session: the daemon ends).
out=$(ic logout "iscsi://127.0.0.1:$TGT_PORT/$T1") || fail "logout URL"
[ "$out" = "Logout of [target: $T1] successful: $ROOT" ] || fail "logout URL printed: $out"
ic login "$(sessions_url 1)" || fail "third login to $T1"
out=$(ic logout -p "127.0.0.1:$TGT_PORT") || fail "logout -p"
[ "$(sort <<<"$out")" = "Logout of [target: $T1] successful: $ROOT"$'\n'"Logout of [target: $T2] successful: $ROOT" ] ||
  fail "logout -p printed: $out"
sessions_assert_gone
ic login "$(sessions_url 1)" || fail "fourth login to $T1"
ic logout --all || fail "logout --all"
sessions_assert_gone
expect_exit 21 "no active sessions" "$ISER_CONNECT" logout --all
expect_exit 21 "no active sessions" "$ISER_CONNECT" session
echo "logout --all: ok"

# A portal's URL logs in to every target it reports: the first login starts the daemon, which
# logs in to the rest of them at once (one batch); iscsiadm's lines, every "Logging in" first.
for t in 3 4 5; do
  tgt_target "$t" "iqn.2026-11.test:t$t"
  tgt_lun "$t" 1 4M
done
out=$(ic login "iscsi://127.0.0.1:$TGT_PORT") || fail "login to the portal: $out"
[ "$(head -5 <<<"$out" | grep -c "^Logging in to \[target: iqn.2026-11.test:t[1-5], portal: 127.0.0.1:$TGT_PORT\]$")" = 5 ] ||
  fail "login to the portal printed: $out"
[ "$(grep -c "^Login to .* successful: $ROOT/iqn.2026-11.test:t[1-5]$" <<<"$out")" = 5 ] ||
  fail "login to the portal printed: $out"
for t in 1 2 3 4 5; do
  [ -f "$ROOT/iqn.2026-11.test:t$t/lun1" ] || fail "t$t/lun1 is missing: $(ls "$ROOT")"
done
expect_exit 15 "session exists" "$ISER_CONNECT" login "iscsi://127.0.0.1:$TGT_PORT"
ic logout --all >/dev/null || fail "logout --all"
sessions_assert_gone
echo "login to a portal logs in to its 5 targets: ok"
checks_done
