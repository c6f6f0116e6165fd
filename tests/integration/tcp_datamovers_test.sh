#!/usr/bin/env bash
# Which iSCSI/TCP datamover the CLI uses, and that it says so (docs/initiator.md, "The iSCSI/TCP
# datamovers"): io_uring unless ISER_CONNECT_TCP_DATAMOVER forces the epoll fallback; the info
# line with -v, bench's connection line and its JSON field; verified I/O over each; an unknown
# value of the variable is refused with exit code 7. Needs io_uring (this fails where the kernel
# or a seccomp profile refuses it: the default would then be epoll).
# Usage: tcp_datamovers_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
. "$here/../harness/tgt.sh"
unset ISER_CONNECT_TCP_DATAMOVER

tgt_start
iqn=iqn.2026-11.io.iser-connect.test:datamovers
tgt_target 1 $iqn
tgt_lun 1 1 32M
url=iscsi://127.0.0.1:$TGT_PORT/$iqn/1

for mover in io_uring epoll; do
  env=()
  [ $mover = io_uring ] || env=(ISER_CONNECT_TCP_DATAMOVER=epoll)
  out=$(env "${env[@]}" timeout 60 "$cli" -v bench "$url" --rw randrw --bs 64k --qd 8 --time 1 \
    --verify 2>&1)
  echo "$out"
  check "bench over $mover logs the choice" grep -q "iSCSI/TCP datamover: $mover" <<<"$out"
  check "bench over $mover prints its connection" \
    grep -qF "connection: TCP 127.0.0.1:$TGT_PORT ($mover)" <<<"$out"
  check "bench over $mover verified every block" grep -q "checked, 0 bad" <<<"$out"
  json=$(env "${env[@]}" timeout 60 "$cli" bench "$url" --rw read --bs 512k --qd 4 --time 1 --json)
  check "bench --json over $mover names the connection" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["connection"] == sys.argv[2], d["connection"]
assert d["ios"] > 0, d' "$json" "TCP 127.0.0.1:$TGT_PORT ($mover)"
done

expect_exit 7 "ISER_CONNECT_TCP_DATAMOVER=poll: must be io_uring or epoll" \
  env ISER_CONNECT_TCP_DATAMOVER=poll "$cli" ls "$url"

checks_done
