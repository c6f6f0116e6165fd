#!/bin/bash
# rping server and client (1000 verified pings) between two processes over softrdma.
set -eu
. "$(dirname "$0")/wait-listener.sh"
requires rping timeout
export SOFTRDMA_NAMESPACE=rping-$$
temp_dir log rping
timeout 60 "$SOFTRDMA_RUN" rping -s -a 127.0.0.1 -p 7174 -C 1000 -V >"$log/server" 2>&1 &
server=$!
# SIGTERM to timeout(1) is passed on to the server it runs (SIGKILL would orphan the server).
cleanup_push "kill -TERM $server 2>/dev/null || true"
wait_listener "$SOFTRDMA_NAMESPACE" 7174
# rping 44 never joins its CM event thread: once the pings are done its main thread disconnects,
# destroys the id and closes the event channel, while that thread, woken by the DISCONNECTED
# event, loops back into rdma_get_cm_event and may find the fd closed (exit 255, "Bad file
# descriptor"). That race is rping's, after every ping has been checked (below); any other
# failure is ours. checked_exit ROLE RC: fails the test unless RC is 0 or that race.
checked_exit() {
  local role=$1 rc=$2
  [ "$rc" -eq 0 ] && return 0
  if [ "$rc" -eq 255 ] && grep -q "$role DISCONNECT EVENT" "$log/$role" &&
    grep -q "rdma_get_cm_event: Bad file descriptor" "$log/$role"; then
    echo "rping $role: its CM thread read the closed event channel after DISCONNECTED (rping's race)"
    return 0
  fi
  cat "$log/$role"
  fail "rping $role failed (exit $rc)"
}
rc=0
timeout 60 "$SOFTRDMA_RUN" rping -c -a 127.0.0.1 -p 7174 -C 1000 -v -V >"$log/client" 2>&1 || rc=$?
checked_exit client $rc
rc=0
wait $server || rc=$?
checked_exit server $rc
# stderr lines may land inside stdout's buffered lines: count the distinct verified pings.
n=$(grep -o "rdma-ping-[0-9]*:" "$log/client" | sort -u | wc -l)
tail -2 "$log/client"
[ "$n" = 1000 ] || fail "$n of 1000 pings verified"
grep -q "data mismatch\|error" "$log/client" "$log/server" && fail "rping reported errors"
echo PASS
