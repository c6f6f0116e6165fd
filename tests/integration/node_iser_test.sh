#!/usr/bin/env bash
# Node records over iSER: discover -I iser -o new against tgtd's iSER target under softrdma
# (tests/harness/iser-netns runs this script) records iSER as the transport of the new records and
# of their discovery, and -o old after a plain TCP discovery keeps the transport the user has.
# Usage: iser-netns SOFTRDMA_RUN node_iser_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
initiator=iqn.2026-11.io.iser-connect.test:node-iser
export ISER_CONNECT_INITIATOR_NAME=$initiator
TGT_LLD=iser TGT_ISER_INITIATOR=$initiator
. "$here/../harness/functions.sh"
. "$here/../harness/tgt.sh"

tgt_start
iqn=iqn.2026-11.io.iser-connect.test:node-iser
tgt_target 1 $iqn-a
tgt_target 2 $iqn-b
tgt_lun 1 1 8M
tgt_lun 2 1 8M
portal=127.0.0.1:3260
temp_dir work node-iser
cfg=$work/cfg

out=$(timeout 30 "$cli" discover -I iser -p "$portal" -o new --config-dir "$cfg")
echo "$out"
check "discover -I iser -o new prints both targets" test "$(wc -l <<<"$out")" -eq 2
list=$(timeout 30 "$cli" node --config-dir "$cfg")
check "both records" test "$list" = "$(printf '%s\n' "$portal,1 $iqn-a" "$portal,1 $iqn-b")"
show=$(timeout 30 "$cli" node -T $iqn-a --config-dir "$cfg")
check "the record's transport is iser" grep -qx "iface.transport_name = iser" <<<"$show"
check "it was discovered over iser" grep -qx "node.discovery_transport = iser" <<<"$show"
timeout 30 "$cli" discover -p "$portal" -o new -o old --config-dir "$cfg" >/dev/null
show=$(timeout 30 "$cli" node -T $iqn-a --config-dir "$cfg")
check "a TCP discovery -o old keeps the transport" grep -qx "iface.transport_name = iser" <<<"$show"
check "and records that discovery ran over tcp" grep -qx "node.discovery_transport = tcp" <<<"$show"
out=$(timeout 30 "$cli" discover -p "iser://$portal" -o new --config-dir "$work/scheme")
check "an iser:// portal makes iSER records" \
  grep -qx "iface.transport_name = iser" <(timeout 30 "$cli" node -T $iqn-b --config-dir "$work/scheme")

checks_done
