#!/bin/bash
# unaligned_test.sh PLUGIN CLIENT: requests that are not aligned to the logical block (a client
# that ignores the advertised minimum block size) are served by read-modify-write, and
# concurrent ones that share a block do not lose each other's bytes; on 512- and 4096-byte LUNs.
set -euo pipefail
. "$(dirname "$0")/lib.sh" "$1"
CLIENT=$2
[ -x "$CLIENT" ] || fail "no client at $CLIENT"

tgt_start
tgt_target 1 iqn.2026-11.test:disk
tgt_lun 1 1 8M
tgt_lun 1 2 8M --blocksize=4096
nbd_start iscsi://127.0.0.1:$TGT_PORT/iqn.2026-11.test:disk
for lun in 1 2; do
  timeout 120 "$CLIENT" "$(nbd_uri $lun)" || fail "unaligned I/O on LUN $lun"
done
nbd_stop
echo PASS
