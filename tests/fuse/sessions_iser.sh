#!/bin/bash
# iser-connect login over iSER (tgtd's iSER target under softrdma, in the network namespace
# tests/harness/iser-netns makes): the LUN files carry verified data, `session` shows transport
# iser and RDMAExtensions=Yes, `logout --all` leaves nothing behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3
[ "${TGT_LLD:-}" = iser ] || fail "run with TGT_LLD=iser under tests/harness/iser-netns"
sessions_setup
T1=iqn.2026-11.test:t1
tgt_target 1 "$T1"
tgt_lun 1 1 32M

ic login "iser://127.0.0.1:$TGT_PORT/$T1" || fail "login over iSER"
dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=16 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/$T1/lun1" bs=1M conv=fsync,notrunc status=none
cmp -n $((16 << 20)) "$FUSE_DIR/img" "$ROOT/$T1/lun1" || fail "read back over iSER"
cmp -n $((16 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 1 1)" || fail "backing file"
out=$(ic session -P 1) || fail "session"
echo "$out"
grep -q "^iser: .* 127.0.0.1:$TGT_PORT $T1 (logged in)" <<<"$out" || fail "session does not show iser"
grep -q "RDMAExtensions: Yes" <<<"$out" || fail "RDMAExtensions is not Yes"
json=$(ic session --json) || fail "session --json"
python3 -c 'import json,sys; s=json.loads(sys.argv[1]); assert len(s)==1 and s[0]["transport"]=="iser", s' "$json" ||
  fail "session --json: $json"
echo "login over iSER, session shows iser: ok"
ic logout --all || fail "logout --all"
sessions_assert_gone
