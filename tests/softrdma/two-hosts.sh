#!/bin/bash
# softrdma between two hosts: two network namespaces joined only by a veth pair (host A 10.91.0.1,
# host B 10.91.0.2), so no abstract socket and no cross-memory attach joins the processes and the
# RDMA traffic travels over TCP. tgtd's iSER target runs on A; on B, iser-connect discovers it
# over TCP, then lists it and runs a verified bench over iser://.
# Usage: two-hosts.sh PATH/TO/iser-connect
set -eu
CLI=$1
. "$(dirname "$0")/tgt-lib.sh"  # runs the rest in a network namespace of its own: host A
need nsenter unshare
[ -x "$CLI" ] || { echo "FAIL: $CLI is missing"; exit 1; }

# Host B's network namespace lives as long as this placeholder (which holds no test output).
unshare -n sleep 150 >/dev/null 2>&1 &
HOST_B=$!
stop_all() {
  kill "$HOST_B" 2>/dev/null || true
  tgt_stop
  rm -rf "$WORK"
}
trap stop_all EXIT
for _ in $(seq 50); do
  [ "$(readlink /proc/$HOST_B/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
  sleep 0.1
done
on_b() { nsenter -t "$HOST_B" -n "$@"; }
ip link add veth-a type veth peer name veth-b netns "$HOST_B"
ip addr add 10.91.0.1/24 dev veth-a
ip link set veth-a up
on_b ip link set lo up
on_b ip addr add 10.91.0.2/24 dev veth-b
on_b ip link set veth-b up

export TGT_ADDR=10.91.0.1
start_tgtd 64
trap stop_all EXIT

out=$(on_b timeout 20 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" discover -p 10.91.0.1 2>&1) ||
  { echo "$out"; echo "FAIL: discovery from host B"; exit 1; }
echo "$out"
grep -q "^10.91.0.1:3260,1 $IQN\$" <<<"$out" || { echo "FAIL: discovery from host B"; exit 1; }
URL="iser://10.91.0.1/$IQN/1"
out=$(on_b timeout 20 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" ls "$URL" 2>&1) ||
  { echo "$out"; echo "FAIL: ls over iSER from host B"; exit 1; }
echo "$out"
grep -q "67108864\|64 MiB\|64.0 MiB" <<<"$out" || { echo "FAIL: ls over iSER from host B"; exit 1; }
on_b timeout 60 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" bench "$URL" --rw randwrite --bs 64k \
  --qd 8 --time 1 --verify || { echo "FAIL: verified bench over iSER from host B"; exit 1; }
# The RDMA connection went through TCP: tgtd's TCP listener for RDMA CM port 3260.
ss -ltn | grep -q ":23260 " || { echo "FAIL: no softrdma TCP listener on host A"; exit 1; }
echo PASS
