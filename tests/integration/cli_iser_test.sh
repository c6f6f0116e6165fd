#!/usr/bin/env bash
# End-to-end test of the iser-connect CLI over iSER: tgtd's iSER target under softrdma on
# 127.0.0.1:3260 of a private network namespace (tests/harness/iser-netns runs this script).
# SendTargets over TCP and over iSER (-I iser, like iscsiadm), ls and a verified bench over
# iser:// and over ?iser / --transport, CHAP over iSER, and the errors an iSER user meets.
# Usage: iser-netns SOFTRDMA_RUN cli_iser_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
initiator=iqn.2026-11.io.iser-connect.test:cli-iser
export ISER_CONNECT_INITIATOR_NAME=$initiator
TGT_LLD=iser TGT_ISER_INITIATOR=$initiator
. "$here/../harness/functions.sh"
. "$here/../harness/tgt.sh"


tgt_start
iqn=iqn.2026-11.io.iser-connect.test:cli-iser
tgt_target 1 $iqn
tgt_target 2 $iqn-chap
tgt_lun 1 1 32M
tgt_lun 2 1 16M
tgt_chap 2 alice alice-secret-1
portal=127.0.0.1:3260

out=$(timeout 30 "$cli" discover -p "$portal")
echo "$out"
check "discover over TCP lists the iSER targets" grep -qx "$portal,1 $iqn" <<<"$out"
out=$(timeout 30 "$cli" discover -I iser -p "$portal")
echo "$out"
check "discover -I iser runs SendTargets over iSER" grep -qx "$portal,1 $iqn" <<<"$out"
check "discover -I iser lists both targets" test "$(wc -l <<<"$out")" -eq 2

out=$(timeout 30 "$cli" -v ls "iser://$portal/$iqn" 2>&1)
echo "$out"
check "ls over iser:// shows LUN 1" grep -q "size 32.0 MiB (33554432 bytes)" <<<"$out"
check "ls over iser:// logged in over iSER" grep -q "iSER $portal" <<<"$out"
check "?iser selects iSER" timeout 30 "$cli" ls "iscsi://$portal/$iqn/1?iser"
check "--transport iser selects iSER" timeout 30 "$cli" ls -I iser "iscsi://$portal/$iqn/1"

out=$(timeout 60 "$cli" bench "iser://$portal/$iqn/1" --rw randwrite --bs 4k --qd 128 --time 2 --verify --json)
echo "$out"
check "bench randwrite QD128 --verify over iSER finds no bad data" python3 -c '
import json,sys; d=json.loads(sys.argv[1]); assert d["ios"]>0 and d["verified_units"]>0 and d["bad_units"]==0' "$out"
out=$(timeout 60 "$cli" bench "iser://$portal/$iqn/1" --rw write --bs 512k --qd 8 --time 2 --verify --size 16m)
echo "$out"
check "bench 512 KiB writes QD8 over iSER verify" grep -q "0 bad" <<<"$out"
out=$(timeout 60 "$cli" bench "iser://$portal/$iqn/1" --rw randrw --bs 64k --qd 32 --time 2 --verify)
echo "$out"
check "bench 64 KiB randrw QD32 over iSER verify" grep -q "0 bad" <<<"$out"

LIBISCSI_CHAP_PASSWORD=alice-secret-1 check "CHAP over iSER" \
  timeout 30 "$cli" ls "iser://alice@$portal/$iqn-chap/1?auth=md5"
export LIBISCSI_CHAP_PASSWORD=wrong-secret-1
expect_exit 24 "Authentication failure" "$cli" ls "iser://alice@$portal/$iqn-chap/1?auth=md5"
unset LIBISCSI_CHAP_PASSWORD
expect_exit 19 "refused: target answered Not found" "$cli" ls "iser://$portal/iqn.2026-11.nonexistent:x/1"
expect_exit 5 "127.0.0.1:3261.*(listener|refused)" "$cli" ls "iser://127.0.0.1:3261/$iqn/1"

# RLIMIT_MEMLOCK too small for our registrations: a clear error naming the limit and the fix.
# (CAP_IPC_LOCK lifts the limit, so root runs it without that capability.)
no_ipc_lock=()
[ "$(id -u)" = 0 ] && no_ipc_lock=(setpriv --bounding-set=-ipc_lock)
expect_exit 1 "RLIMIT_MEMLOCK \\(1024 KiB\\).*ulimit -l" "${no_ipc_lock[@]}" bash -c \
  'ulimit -l 1024 && exec "$0" ls "$1"' "$cli" "iser://$portal/$iqn/1"

# A device without reliable connected QPs (AWS EFA; softrdma's efa profile in this process only,
# tgtd keeps its own): iSER cannot run there, and the error says so and what to use instead.
SOFTRDMA_PROFILE=efa expect_exit 1 "reliable connected \\(RC\\).*iscsi://" "$cli" ls \
  "iser://$portal/$iqn/1"

checks_done
