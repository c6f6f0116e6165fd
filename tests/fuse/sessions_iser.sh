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
out=$(ic session) || fail "session"
grep -q "^iser: \[[0-9]*\] 127.0.0.1:$TGT_PORT,1 $T1 (non-flash)$" <<<"$out" ||
  fail "session does not show iser: $out"
out=$(ic session -P 2) || fail "session -P 2"
echo "$out"
grep -q "RDMAExtensions: Yes" <<<"$out" || fail "RDMAExtensions is not Yes"
grep -q "Datamover: device .*, STags by .*, [0-9]* receives" <<<"$out" ||
  fail "session -P 2 does not say how the connection moves data"
json=$(ic session --json) || fail "session --json"
python3 -c 'import json,sys; s=json.loads(sys.argv[1]); assert len(s)==1 and s[0]["transport"]=="iser" and s[0]["datamover"].startswith("device "), s' "$json" ||
  fail "session --json: $json"
echo "login over iSER, session shows iser: ok"
ic logout --all || fail "logout --all"
sessions_assert_gone

# Eight iSER sessions in one session daemon under the usual RLIMIT_MEMLOCK of 8 MiB, without
# CAP_IPC_LOCK (dropped from root's bounding set; the daemon the first login starts inherits
# both): the connections share the limit, each taking fewer buffers and data slots than it
# would unlimited (docs/rdma-hardware.md). Those that fit work and carry verified data; those
# that do not fail with the documented message naming `ulimit -l`.
for i in $(seq 2 9); do
  tgt_target "$i" "iqn.2026-11.test:t$i"
  tgt_lun "$i" 1 4M
done
no_ipc_lock=()
[ "$(id -u)" = 0 ] && no_ipc_lock=(setpriv --bounding-set=-ipc_lock)
dd if=/dev/urandom of="$FUSE_DIR/small" bs=1M count=2 status=none
logged_in=0 refused=0
for i in $(seq 2 9); do
  url="iser://127.0.0.1:$TGT_PORT/iqn.2026-11.test:t$i"
  if out=$("${no_ipc_lock[@]}" bash -c 'ulimit -l 8192 && exec timeout 120 "$ISER_CONNECT" login "$1"' \
      _ "$url" 2>&1); then
    lun=$ROOT/iqn.2026-11.test:t$i/lun1
    timeout 60 dd if="$FUSE_DIR/small" of="$lun" bs=1M conv=fsync,notrunc status=none ||
      fail "write to t$i under 8 MiB of locked memory"
    cmp -n $((2 << 20)) "$FUSE_DIR/small" "$lun" || fail "read back from t$i under 8 MiB"
    logged_in=$((logged_in + 1))
  else
    grep -q "RLIMIT_MEMLOCK.*ulimit -l" <<<"$out" || fail "t$i failed without naming ulimit -l: $out"
    refused=$((refused + 1))
  fi
done
echo "8 MiB of locked memory: $logged_in iSER sessions with verified data, $refused refused"
[ "$logged_in" -ge 3 ] || fail "only $logged_in iSER sessions fit in 8 MiB (3 do: docs/rdma-hardware.md)"
[ "$refused" -ge 1 ] || fail "eight iSER sessions in 8 MiB: the budget is not counted"
ic logout --all || fail "logout --all"
sessions_assert_gone
