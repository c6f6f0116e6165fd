#!/bin/bash
# tgtd's iSER target under softrdma, driven by libiscsi's unmodified tools over iser://.
# Runs itself again inside a private network namespace where 127.0.0.1:3260 serves TCP and iSER.
set -eu
. "$(dirname "$0")/tgt-lib.sh"
requires iscsi-inq iscsi-readcapacity16 iscsi-perf iscsi-ls
start_tgtd 64
! grep -q "Failed to initialize RDMA" "$TGT_DIR/tgtd.log" || fail "tgtd: $(cat "$TGT_DIR/tgtd.log")"
URL="iser://127.0.0.1:3260/$IQN/1"

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-inq -i "$INITIATOR" "$URL")
echo "$out"
grep -q "Product:VIRTUAL-DISK" <<<"$out" || fail "iscsi-inq gave no INQUIRY data"

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-readcapacity16 -i "$INITIATOR" "$URL")
echo "$out"
grep -q "LOGICAL BLOCK LENGTH IN BYTES:512" <<<"$out" || fail "unexpected READ CAPACITY"
grep -q "RETURNED LOGICAL BLOCK ADDRESS:131071" <<<"$out" || fail "unexpected capacity"

out=$(timeout 30 "$SOFTRDMA_RUN" iscsi-perf -i "$INITIATOR" -t 3 -b 256 "$URL" 2>&1 || true)
echo "$out" | tail -5
grep -qE "[0-9]+ MB/s|MiB/s|IOPS" <<<"$out" || fail "iscsi-perf reported no figures"

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-ls -i "$INITIATOR" "iscsi://127.0.0.1:3260?iser")
echo "$out"
grep -q "$IQN" <<<"$out" || fail "iscsi-ls found no target over iSER"
echo PASS
