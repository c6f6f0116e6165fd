#!/bin/bash
# softrdma-run --profile NAME: ibv_devinfo -v sees each family's transport, link layer and vendor;
# a misspelt name fails at device open, naming the known profiles.
set -eu
. "$(dirname "$0")/../harness/functions.sh"
for p in ibv_devinfo timeout; do
  command -v $p >/dev/null || fail "required program $p is missing"
done
# profile transport link-layer vendor_id
while read -r profile transport link vendor; do
  out=$(timeout 10 "$SOFTRDMA_RUN" --profile "$profile" ibv_devinfo -v)
  grep -q "transport:.*$transport" <<<"$out" || fail "$profile: transport is not $transport"
  grep -q "link_layer:.*$link" <<<"$out" || fail "$profile: link layer is not $link"
  grep -q "vendor_id:.*$vendor" <<<"$out" || fail "$profile: vendor_id is not $vendor"
  echo "$profile: $transport, $link, vendor $vendor"
done <<'TABLE'
mlx5 InfiniBand Ethernet 0x02c9
rxe InfiniBand Ethernet 0xffffff
bnxt_re InfiniBand Ethernet 0x14e4
siw iWARP Ethernet 0x626d74
irdma-roce InfiniBand Ethernet 0x8086
irdma-iwarp iWARP Ethernet 0x8086
cxgb4 iWARP Ethernet 0x1425
TABLE
rc=0
out=$(timeout 10 "$SOFTRDMA_RUN" --profile mlx4 ibv_devinfo 2>&1) || rc=$?
echo "$out"
[ "$rc" -ne 0 ] || fail "ibv_devinfo succeeded under an unknown profile"
grep -q "SOFTRDMA_PROFILE=mlx4 is not a known profile (known: mlx5 rxe bnxt_re siw" <<<"$out" ||
  fail "no message naming the known profiles"
echo PASS
