#!/bin/bash
# ibv_devices and ibv_devinfo -v see softrdma0 with an active RoCE port.
set -eu
for p in ibv_devices ibv_devinfo timeout; do
  command -v $p >/dev/null || { echo "FAIL: required program $p is missing"; exit 1; }
done
out=$(timeout 10 "$SOFTRDMA_RUN" ibv_devices)
echo "$out"
grep -q "softrdma0" <<<"$out" || { echo "FAIL: ibv_devices does not list softrdma0"; exit 1; }
out=$(timeout 10 "$SOFTRDMA_RUN" ibv_devinfo -v)
echo "$out"
grep -q "hca_id:.*softrdma0" <<<"$out" || { echo "FAIL: no hca_id softrdma0"; exit 1; }
grep -q "state:.*PORT_ACTIVE" <<<"$out" || { echo "FAIL: port not active"; exit 1; }
grep -q "link_layer:.*Ethernet" <<<"$out" || { echo "FAIL: link layer is not Ethernet (RoCE)"; exit 1; }
echo PASS
