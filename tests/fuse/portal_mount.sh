#!/bin/bash
# The whole-portal mount: `iser-connect mount iscsi://PORTAL DIR` serves every target the portal
# reports as DIR/<iqn>/lun<N>; a target added to tgtd appears after a rescan (SIGHUP, and
# `session --rescan`), a target deleted from tgtd disappears after one and its SID is free again;
# `session` lists the mount's sessions; fusermount3 -u ends it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
sessions_setup
T=iqn.2026-11.test:t
tgt_target 1 "${T}1"
tgt_lun 1 1 32M
tgt_target 2 "${T}2"
tgt_lun 2 1 16M
PORTAL_URL=iscsi://127.0.0.1:$TGT_PORT

FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
# A deleted target's session recovers in vain: its I/O gives up after 5 s, not 120.
fuse_mount "$PORTAL_URL" "$MNT" --replacement-timeout 5
[ "$(ls "$MNT")" = "${T}1"$'\n'"${T}2" ] || fail "tree of the portal: $(ls "$MNT")"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=8 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$MNT/${T}2/lun1" bs=1M conv=fsync,notrunc status=none
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 2 1)" || fail "data through ${T}2/lun1"
json=$(ic session --json) || fail "session --json"
python3 - "$json" "$MNT" "$TGT_PORT" <<'PY' || fail "session --json: $json"
import json, sys
doc, mnt, port = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
assert len(doc) == 2, doc
for s in doc:
    assert s["root"] == mnt and s["transport"] == "tcp", s
    assert s["portal_mount"] == {"address": "127.0.0.1", "port": port, "tpgt": None}, s
    assert s["portal"] == {"address": "127.0.0.1", "port": port, "tpgt": 1}, s
PY
echo "whole-portal mount of two targets: ok"

has() { [ -f "$MNT/$1/lun1" ]; }
lacks() { [ ! -e "$MNT/$1" ] && ! ls "$MNT" | grep -qxF "$1"; }

tgt_target 3 "${T}3"
tgt_lun 3 1 8M
has "${T}3" && fail "${T}3 appeared before any rescan"
kill -HUP "$FUSE_PID"
wait_for 30 has "${T}3" || fail "${T}3 did not appear after SIGHUP: $(ls "$MNT")"
ic session | grep -q "^tcp: \[3\] .* ${T}3 (non-flash)$" || fail "${T}3 has not SID 3: $(ic session)"
echo "rescan on SIGHUP adds a target: ok"

tgt_target 4 "${T}4"
tgt_lun 4 1 8M
out=$(ic session --rescan) || fail "session --rescan: $out"
echo "$out"
grep -qF "added ${T}4" <<<"$out" || fail "session --rescan did not report ${T}4"
has "${T}4" || fail "${T}4 is missing after session --rescan: $(ls "$MNT")"
echo "session --rescan adds a target: ok"

tgtadm --lld iscsi --op delete --force --mode target --tid 3 || fail "deleting target 3"
kill -HUP "$FUSE_PID"
wait_for 60 lacks "${T}3" || fail "${T}3 is still there after SIGHUP: $(ls "$MNT")"
tgtadm --lld iscsi --op delete --force --mode target --tid 4 || fail "deleting target 4"
out=$(ic session --rescan) || fail "session --rescan: $out"
grep -qF "removed ${T}4" <<<"$out" || fail "session --rescan did not report removing ${T}4: $out"
lacks "${T}4" || fail "${T}4 is still there after session --rescan: $(ls "$MNT")"
[ "$(ls "$MNT")" = "${T}1"$'\n'"${T}2" ] || fail "tree after the removals: $(ls "$MNT")"
# The SIDs of the targets gone are given back by the rescans themselves, not at the next listing
# of the table (nothing listed it since ${T}3 had SID 3).
sids_left() { [ "$(cd "$STATE_DIR" && echo sid-*)" = "sid-1 sid-2" ]; }
wait_for 10 sids_left || fail "SIDs still claimed: $(ls "$STATE_DIR")"
cmp -n $((8 << 20)) "$FUSE_DIR/img" "$MNT/${T}2/lun1" || fail "${T}2 after the rescans"
echo "rescans remove deleted targets: ok"

fuse_unmount "$MNT"
sessions_assert_gone
