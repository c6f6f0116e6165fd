#!/bin/bash
# SOFTRDMA_PCAP of iser-connect's own iSER sessions with tgtd (ls, then a short verified bench):
# tshark follows both connections from softrdma's CM MADs (REQ, REP, RTU, DREQ, DREP) and decodes
# them as iSER and iSCSI, with the target's RDMA WRITEs (read data) and RDMA READs (write data), and
# no malformed frame. The bench runs 0.1 s: every 64 KiB is written whole into the capture.
# Usage: ours-iser-pcap.sh PATH/TO/iser-connect
set -eu
CLI=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tgt-lib.sh"
. "$here/pcap-lib.sh"
requires tshark
export SOFTRDMA_PCAP=$WORK/iser.pcap
start_tgtd 16
URL="iser://127.0.0.1:3260/$IQN/1"
timeout 30 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" ls "$URL"
out=$(timeout 30 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" bench "$URL" --rw randrw --bs 64k --qd 4 \
  --time 0.1 --verify --no-progress)
echo "$out"
grep -q "checked, 0 bad" <<<"$out" || fail "bench --verify found bad data"
decode_pcap "$SOFTRDMA_PCAP"
[ "$(grep -c "CM: ConnectRequest" "$WORK/summary")" = 2 ] ||
  fail "expected the two sessions' ConnectRequests"
expect_summary "CM: ConnectReply" "CM: ReadyToUse" "CM: DisconnectRequest" "CM: DisconnectReply" \
  "RC RDMA Write First" "RC RDMA Write Last" "RC RDMA Read Request" "RC RDMA Read Response First" \
  "RC RDMA Read Response Last" "RC Acknowledge"
expect_detail "iSCSI Extensions for RDMA" "iSCSI (Login Command)" "iSCSI (Login Response)" \
  "iSCSI (SCSI Command)" "iSCSI (SCSI Response)" "iSCSI (Logout Command)" "iSCSI (Logout Response)"
echo PASS
