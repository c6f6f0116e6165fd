#!/bin/bash
# tgtd's iSER target under softrdma, driven by libiscsi's unmodified tools over iser://.
# Runs itself again inside a private network namespace where 127.0.0.1:3260 serves TCP and iSER.
set -eu
. "$(dirname "$0")/tgt-lib.sh"
need iscsi-inq iscsi-readcapacity16 iscsi-perf iscsi-ls
start_tgtd 64
grep -q "Failed to initialize RDMA" "$TGT_DIR/tgtd.log" && { cat "$TGT_DIR/tgtd.log"; exit 1; }
URL="iser://127.0.0.1:3260/$IQN/1"

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-inq -i "$INITIATOR" "$URL")
echo "$out"
grep -q "Product:VIRTUAL-DISK" <<<"$out" || { echo "FAIL: iscsi-inq gave no INQUIRY data"; exit 1; }

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-readcapacity16 -i "$INITIATOR" "$URL")
echo "$out"
grep -q "LOGICAL BLOCK LENGTH IN BYTES:512" <<<"$out" || { echo "FAIL: unexpected READ CAPACITY"; exit 1; }
grep -q "RETURNED LOGICAL BLOCK ADDRESS:131071" <<<"$out" || { echo "FAIL: unexpected capacity"; exit 1; }

out=$(timeout 30 "$SOFTRDMA_RUN" iscsi-perf -i "$INITIATOR" -t 3 -b 256 "$URL" 2>&1 || true)
echo "$out" | tail -5
grep -qE "[0-9]+ MB/s|MiB/s|IOPS" <<<"$out" || { echo "FAIL: iscsi-perf reported no figures"; exit 1; }

out=$(timeout 20 "$SOFTRDMA_RUN" iscsi-ls -i "$INITIATOR" "iscsi://127.0.0.1:3260?iser")
echo "$out"
grep -q "$IQN" <<<"$out" || { echo "FAIL: iscsi-ls found no target over iSER"; exit 1; }
echo PASS
