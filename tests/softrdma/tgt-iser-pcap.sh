#!/bin/bash
# SOFTRDMA_PCAP while tgtd and libiscsi talk iSER: tshark decodes the capture as RoCEv2 (RC SENDs,
# RDMA WRITEs, acknowledgements) and finds no malformed frame. Wireshark's RPC-over-RDMA heuristic
# claims iSER SENDs and then calls them malformed, so it is disabled. (Wireshark's iSER dissector
# needs the CM MADs of the connection, which softrdma does not write yet.)
set -eu
if [ "${SOFTRDMA_IN_NETNS:-}" != 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    exec env SOFTRDMA_IN_NETNS=1 timeout 120 unshare -n "$0" "$@"
  fi
  exec env SOFTRDMA_IN_NETNS=1 timeout 120 unshare -rn "$0" "$@"
fi
. "$(dirname "$0")/tgt-lib.sh"
need iscsi-inq iscsi-readcapacity16 tshark
export SOFTRDMA_PCAP=$WORK/iser.pcap
start_tgtd 16
URL="iser://127.0.0.1:3260/$IQN/1"
timeout 20 "$SOFTRDMA_RUN" iscsi-inq -i "$INITIATOR" "$URL" >/dev/null
timeout 20 "$SOFTRDMA_RUN" iscsi-readcapacity16 -i "$INITIATOR" "$URL" >/dev/null
dd if=/dev/urandom of="$WORK/lun1.img" bs=64k count=4 conv=notrunc status=none
timeout 30 "$SOFTRDMA_RUN" iscsi-perf -i "$INITIATOR" -t 1 -b 64 "$URL" >/dev/null 2>&1 || true
decoded=$(timeout 60 tshark -r "$SOFTRDMA_PCAP" --disable-protocol rpcordma 2>&1)
echo "$decoded" | head -20
n=$(wc -l <<<"$decoded")
echo "$n frames"
[ "$n" -gt 10 ] || { echo "FAIL: capture holds too few frames"; exit 1; }
if grep -qi "malformed" <<<"$decoded"; then
  grep -i malformed <<<"$decoded" | head
  echo "FAIL: malformed frames in the capture"
  exit 1
fi
for what in "RC Send Only" "RC RDMA Write" "RC Acknowledge"; do
  grep -q "RRoCE .*$what" <<<"$decoded" || { echo "FAIL: tshark finds no $what"; exit 1; }
done
echo PASS
