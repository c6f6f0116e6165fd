#!/bin/bash
# rping server and client (1000 verified pings) between two processes over softrdma.
set -eu
. "$(dirname "$0")/wait-listener.sh"
for p in rping timeout; do
  command -v $p >/dev/null || { echo "FAIL: required program $p is missing"; exit 1; }
done
export SOFTRDMA_NAMESPACE=rping-$$
log=$(mktemp -d)
server=
# SIGTERM to timeout(1) is passed on to the server it runs (SIGKILL would orphan the server).
trap 'kill -TERM $server 2>/dev/null || true; rm -rf "$log"' EXIT
timeout 60 "$SOFTRDMA_RUN" rping -s -a 127.0.0.1 -p 7174 -C 1000 -V >"$log/server" 2>&1 &
server=$!
wait_listener "$SOFTRDMA_NAMESPACE" 7174
timeout 60 "$SOFTRDMA_RUN" rping -c -a 127.0.0.1 -p 7174 -C 1000 -v -V >"$log/client" 2>&1 ||
  { cat "$log/client"; echo "FAIL: rping client failed"; exit 1; }
wait $server || { cat "$log/server"; echo "FAIL: rping server failed"; exit 1; }
# stderr lines may land inside stdout's buffered lines: count the distinct verified pings.
n=$(grep -o "rdma-ping-[0-9]*:" "$log/client" | sort -u | wc -l)
tail -2 "$log/client"
[ "$n" = 1000 ] || { echo "FAIL: $n of 1000 pings verified"; exit 1; }
grep -q "data mismatch\|error" "$log/client" "$log/server" && { echo "FAIL: rping reported errors"; exit 1; }
echo PASS
