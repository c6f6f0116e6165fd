#!/bin/bash
# perftest over the RDMA CM (-R): server and client of TEST complete and report figures.
# Usage: perftest.sh TEST [ARGS...]
set -eu
. "$(dirname "$0")/wait-listener.sh"
test=$1
shift
requires "$test" timeout
export SOFTRDMA_NAMESPACE=perftest-$$
temp_dir log perftest
timeout 60 "$SOFTRDMA_RUN" "$test" -R -p 18515 "$@" >"$log/server" 2>&1 &
server=$!
# SIGTERM to timeout(1) is passed on to the server it runs (SIGKILL would orphan the server).
cleanup_push "kill -TERM $server 2>/dev/null || true"
wait_listener "$SOFTRDMA_NAMESPACE" 18515
timeout 60 "$SOFTRDMA_RUN" "$test" -R -p 18515 "$@" 127.0.0.1 >"$log/client" 2>&1 ||
  { cat "$log/client" "$log/server"; fail "$test client failed"; }
wait $server || { cat "$log/server"; fail "$test server failed"; }
cat "$log/client"
# The result line: message size, iterations, then figures.
grep -qE '^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+' "$log/client" ||
  fail "$test printed no result line"
echo PASS
