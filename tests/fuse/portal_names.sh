#!/bin/bash
# Target names from a portal are checked before they become anything: tgtd, which accepts any
# name but '/' and spaces, serves "..", an IQN with uppercase letters and a proper IQN. `discover`
# lists only the proper one and warns naming each skipped one; the whole-portal mount logs in to
# the proper one only, so its tree holds one directory, reachable, and `session` one session.
# (A name with '/', which made listing the tree fail with EIO, is the unit tests' case: tgtd
# refuses to create one.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires python3
sessions_setup
GOOD=iqn.2026-11.test:good
tgt_target 1 "$GOOD"
tgt_lun 1 1 16M
tgt_target 2 ..
tgt_lun 2 1 8M
tgt_target 3 iqn.2026-11.test:UPPER
tgt_lun 3 1 8M

out=$(ic discover -p "127.0.0.1:$TGT_PORT" 2>"$FUSE_DIR/discover.err") ||
  fail "discover: $(cat "$FUSE_DIR/discover.err")"
[ "$out" = "127.0.0.1:$TGT_PORT,1 $GOOD" ] || fail "discover listed: $out"
grep -qF "skipping the target '..'" "$FUSE_DIR/discover.err" ||
  fail "no warning about '..': $(cat "$FUSE_DIR/discover.err")"
grep -qF "skipping the target 'iqn.2026-11.test:UPPER'" "$FUSE_DIR/discover.err" ||
  fail "no warning about the uppercase IQN: $(cat "$FUSE_DIR/discover.err")"
echo "discover: only $GOOD, a warning naming each skipped name: ok"

FUSE_MOUNT_COMMAND=("$ISER_CONNECT" mount)
fuse_mount "iscsi://127.0.0.1:$TGT_PORT" "$MNT"
[ "$(ls -a "$MNT")" = "."$'\n'".."$'\n'"$GOOD" ] || fail "tree of the portal: $(ls -a "$MNT")"
[ -f "$MNT/$GOOD/lun1" ] || fail "$MNT/$GOOD/lun1 is missing"
json=$(ic session --json) || fail "session --json"
python3 - "$json" "$GOOD" <<'PY' || fail "session --json: $json"
import json, sys
doc, good = json.loads(sys.argv[1]), sys.argv[2]
assert [s["target"] for s in doc] == [good], doc
PY
echo "whole-portal mount: one reachable directory, one session: ok"
fuse_unmount "$MNT"
sessions_assert_gone
