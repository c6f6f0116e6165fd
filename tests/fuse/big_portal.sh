#!/bin/bash
# A big portal: one tgtd with 1000 targets (BIG_PORTAL_TARGETS to change it), whose SendTargets
# answer (64893 bytes) tgtd sends as one Text Response PDU. `discover -o new` must record every
# target, `login --all` log in to every record, a LUN file must read back what was written
# through it, and `logout --all` must end it all. Prints the time login --all took and the
# session daemon's threads and memory with every session logged in (docs/performance.md, "A
# portal of 1000 targets"). BIG_PORTAL_UPDATE_DOC=1 writes them into the row of that table too.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp python3 date
N=${BIG_PORTAL_TARGETS:-1000}
BENCH=$(dirname "$0")/../../bench
DOC_ROW=
if [ -n "${BIG_PORTAL_UPDATE_DOC:-}" ]; then
  DOC_ROW=$(python3 "$BENCH/common.py" begin "portal-of-$N-targets" --env ISER_CONNECT \
    --env ISER_FUSE_MOUNT --env BIG_PORTAL_TARGETS -- bash "$0") || exit 1
fi
sessions_setup
PORTAL=127.0.0.1:$TGT_PORT
CONF=$FUSE_DIR/conf

now_ms() { echo $(($(date +%s%N) / 1000000)); }

t0=$(now_ms)
tgt_target 1 iqn.2026-11.test:t1
tgt_lun 1 1 16M
# The other LUNs have no backing file (bstype null): only target 1's data is checked.
for i in $(seq 2 "$N"); do
  tgt_target "$i" "iqn.2026-11.test:t$i"
  tgt_adm --lld iscsi --op new --mode logicalunit --tid "$i" --lun 1 -b "null-$i" --bstype null
done
echo "tgtd configured with $N targets in $(($(now_ms) - t0)) ms"

t0=$(now_ms)
out=$(ic discover -p "$PORTAL" -o new --config-dir "$CONF" 2>"$FUSE_DIR/discover.err") ||
  fail "discover -o new: $(cat "$FUSE_DIR/discover.err")"
[ "$(wc -l <<<"$out")" = "$N" ] || fail "discover printed $(wc -l <<<"$out") lines, not $N"
grep -qxF "$PORTAL,1 iqn.2026-11.test:t$N" <<<"$out" || fail "discover did not list t$N"
[ "$(grep -c "^iser-connect: new record " "$FUSE_DIR/discover.err")" = "$N" ] ||
  fail "discover -o new did not report $N new records: $(tail -3 "$FUSE_DIR/discover.err")"
[ "$(ic node --config-dir "$CONF" | wc -l)" = "$N" ] || fail "the store does not hold $N records"
echo "discover -o new: $N targets listed and recorded in $(($(now_ms) - t0)) ms: ok"

t0=$(now_ms)
# Longer than ic's 120 s: about 100 ms a session under ASan on a busy 2-vCPU machine.
timeout 600 "$ISER_CONNECT" login --all --config-dir "$CONF" >"$FUSE_DIR/login.out" 2>&1 ||
  fail "login --all: $(tail -5 "$FUSE_DIR/login.out")"
login_ms=$(($(now_ms) - t0))
[ "$(grep -c "^Login to .* successful" "$FUSE_DIR/login.out")" = "$N" ] ||
  fail "login --all did not log in to $N targets: $(grep -v successful "$FUSE_DIR/login.out" | head -5)"
[ "$(ls "$ROOT" | wc -l)" = "$N" ] || fail "the tree holds $(ls "$ROOT" | wc -l) targets, not $N"
pid=$(sessions_daemon_pid) || fail "no session daemon"
threads=$(ls "/proc/$pid/task" | wc -l)
rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
echo "login --all: $N sessions in $login_ms ms; daemon: $threads threads, RSS $((rss_kib / 1024)) MiB"

dd if=/dev/urandom of="$FUSE_DIR/img" bs=1M count=4 status=none
timeout 60 dd if="$FUSE_DIR/img" of="$ROOT/iqn.2026-11.test:t1/lun1" bs=1M oflag=direct \
  conv=notrunc status=none || fail "write through t1/lun1"
cmp -n $((4 << 20)) "$FUSE_DIR/img" "$(tgt_lun_file 1 1)" || fail "t1/lun1 differs from its backing file"
cmp -n $((4 << 20)) "$FUSE_DIR/img" "$ROOT/iqn.2026-11.test:t1/lun1" || fail "t1/lun1 reads back differently"
[ -f "$ROOT/iqn.2026-11.test:t$N/lun1" ] || fail "t$N/lun1 is missing"
echo "data through t1/lun1 equals the backing file: ok"

t0=$(now_ms)
ic logout --all >/dev/null || fail "logout --all"
sessions_assert_gone
logout_ms=$(($(now_ms) - t0))
echo "logout --all: $N sessions in $logout_ms ms: ok"
if [ -n "$DOC_ROW" ]; then
  seconds() { awk -v ms="$1" 'BEGIN {printf "%.2f", ms / 1000}'; }
  build=
  case $(readelf -d "$ISER_CONNECT" 2>/dev/null) in *libasan*) build=", a sanitizer build" ;; esac
  python3 "$BENCH/common.py" end "$DOC_ROW" "login --all $(seconds "$login_ms") s, logout --all \
$(seconds "$logout_ms") s, daemon $threads threads, RSS $((rss_kib / 1024)) MiB$build"
fi
echo PASS
