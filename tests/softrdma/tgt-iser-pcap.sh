#!/bin/bash
# SOFTRDMA_PCAP while tgtd and libiscsi talk iSER: from the CM MADs softrdma writes, tshark follows
# every connection and decodes its RC traffic as iSER and iSCSI (login, SCSI commands and
# responses; RDMA WRITEs and acknowledgements around them), with no malformed frame.
set -eu
. "$(dirname "$0")/tgt-lib.sh"
. "$(dirname "$0")/pcap-lib.sh"
requires iscsi-inq iscsi-readcapacity16 tshark
export SOFTRDMA_PCAP=$WORK/iser.pcap
start_tgtd 16
URL="iser://127.0.0.1:3260/$IQN/1"
timeout 20 "$SOFTRDMA_RUN" iscsi-inq -i "$INITIATOR" "$URL" >/dev/null
timeout 20 "$SOFTRDMA_RUN" iscsi-readcapacity16 -i "$INITIATOR" "$URL" >/dev/null
dd if=/dev/urandom of="$(lun_file 1)" bs=64k count=4 conv=notrunc status=none
# One 4 KiB read at a time: every payload byte goes into the capture.
timeout 30 "$SOFTRDMA_RUN" iscsi-perf -i "$INITIATOR" -t 1 -m 1 -b 8 "$URL" >/dev/null 2>&1 || true
decode_pcap "$SOFTRDMA_PCAP"
expect_summary "CM: ConnectRequest" "CM: ConnectReply" "CM: ReadyToUse" "RC RDMA Write" \
  "RC Acknowledge"
expect_detail "iSCSI Extensions for RDMA" "iSCSI (Login Command)" "iSCSI (Login Response)" \
  "iSCSI (SCSI Command)" "iSCSI (SCSI Response)"
echo PASS
