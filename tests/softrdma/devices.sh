#!/bin/bash
# ibv_devices and ibv_devinfo -v see softrdma0 with an active RoCE port.
set -eu
for p in ibv_devices ibv_devinfo timeout; do
  command -v $p >/dev/null || fail "required program $p is missing"
done
out=$(timeout 10 "$SOFTRDMA_RUN" ibv_devices)
echo "$out"
grep -q "softrdma0" <<<"$out" || fail "ibv_devices does not list softrdma0"
out=$(timeout 10 "$SOFTRDMA_RUN" ibv_devinfo -v)
echo "$out"
grep -q "hca_id:.*softrdma0" <<<"$out" || fail "no hca_id softrdma0"
grep -q "state:.*PORT_ACTIVE" <<<"$out" || fail "port not active"
grep -q "link_layer:.*Ethernet" <<<"$out" || fail "link layer is not Ethernet (RoCE)"
echo PASS
