#!/bin/bash
# perftest over the RDMA CM (-R): server and client of TEST complete and report figures.
# Usage: perftest.sh TEST [ARGS...]
set -eu
. "$(dirname "$0")/wait-listener.sh"
test=$1
shift
for p in "$test" timeout; do
  command -v $p >/dev/null || { echo "FAIL: required program $p is missing"; exit 1; }
done
export SOFTRDMA_NAMESPACE=perftest-$$
log=$(mktemp -d)
server=
# SIGTERM to timeout(1) is passed on to the server it runs (SIGKILL would orphan the server).
trap 'kill -TERM $server 2>/dev/null || true; rm -rf "$log"' EXIT
timeout 60 "$SOFTRDMA_RUN" "$test" -R -p 18515 "$@" >"$log/server" 2>&1 &
server=$!
wait_listener "$SOFTRDMA_NAMESPACE" 18515
timeout 60 "$SOFTRDMA_RUN" "$test" -R -p 18515 "$@" 127.0.0.1 >"$log/client" 2>&1 ||
  { cat "$log/client" "$log/server"; echo "FAIL: $test client failed"; exit 1; }
wait $server || { cat "$log/server"; echo "FAIL: $test server failed"; exit 1; }
cat "$log/client"
# The result line: message size, iterations, then figures.
grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$log/client" ||
  { echo "FAIL: $test printed no result line"; exit 1; }
echo PASS
