#!/usr/bin/env bash
# Node records over iSER: discover -I iser -o new against tgtd's iSER target under softrdma
# (tests/harness/iser-netns runs this script) records iSER as the transport of the new records and
# of their discovery, and -o old after a plain TCP discovery keeps the transport the user has.
# Then iscsiadm's `-m node -l` with both transports at once: a third target served over TCP is
# recorded by a TCP discovery, and `login --all` logs in to the two iSER records and the TCP one in
# one tree; `session --json` shows each with its transport, data written through an iSER and the
# TCP target reads back from the backing files, and `logout --all` ends it all.
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
TGT_LLD=iscsi tgt_target 3 $iqn-tcp
TGT_LLD=iscsi tgt_lun 3 1 8M
portal=127.0.0.1:3260
temp_dir work node-iser
cfg=$work/cfg

out=$(timeout 30 "$cli" discover -I iser -p "$portal" -o new --config-dir "$cfg")
echo "$out"
check "discover -I iser -o new prints both iSER targets" test "$(wc -l <<<"$out")" -eq 2
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

# login --all over both transports in one tree.
out=$(timeout 30 "$cli" discover -p "$portal" -o new --config-dir "$cfg")
show=$(timeout 30 "$cli" node -T $iqn-tcp --config-dir "$cfg")
check "a TCP discovery -o new records the TCP target with transport tcp" \
  grep -qx "iface.transport_name = tcp" <<<"$show"
export ISER_CONNECT_RUNTIME_DIR=$work/run
mkdir "$ISER_CONNECT_RUNTIME_DIR"
root=$ISER_CONNECT_RUNTIME_DIR/iser-connect
cleanup_push "timeout 60 $cli logout --all >/dev/null 2>&1 || true"
check "login --all" timeout 60 "$cli" login --all --config-dir "$cfg"
json=$(timeout 30 "$cli" session --json)
echo "$json"
check "session --json: a and b over iser, the TCP target over tcp" python3 - "$json" "$iqn" <<'PY'
import json, sys
sessions = {s["target"]: s["transport"] for s in json.loads(sys.argv[1])}
iqn = sys.argv[2]
assert sessions == {iqn + "-a": "iser", iqn + "-b": "iser", iqn + "-tcp": "tcp"}, sessions
PY
head -c 4M /dev/urandom >"$work/data"
for t in a tcp; do
  tid=1
  [ $t = tcp ] && tid=3
  timeout 60 dd if="$work/data" of="$root/$iqn-$t/lun1" bs=1M oflag=direct conv=fsync,notrunc \
    status=none
  check "data written through $iqn-$t/lun1 reads back" cmp -n $((4 << 20)) "$work/data" "$root/$iqn-$t/lun1"
  check "and is in its backing file" cmp -n $((4 << 20)) "$work/data" "$(tgt_lun_file $tid 1)"
done
check "logout --all" timeout 60 "$cli" logout --all
check "the tree is unmounted" sh -c "! grep -qF ' $root ' /proc/mounts"
expect_exit 21 "no active sessions" "$cli" session

checks_done
