#!/bin/bash
# softrdma between two hosts: two network namespaces joined only by a veth pair (host A 10.91.0.1,
# host B 10.91.0.2), so no abstract socket and no cross-memory attach joins the processes and the
# RDMA traffic travels over TCP. tgtd's iSER target runs on A; on B, iser-connect discovers it
# over TCP, then lists it and runs a verified bench over iser://.
# Usage: two-hosts.sh PATH/TO/iser-connect
set -eu
CLI=$1
. "$(dirname "$0")/tgt-lib.sh"  # runs the rest in a network namespace of its own: host A
requires nsenter unshare
[ -x "$CLI" ] || fail "$CLI is missing"

# Host B's network namespace lives as long as this placeholder (which holds no test output).
unshare -n sleep 150 >/dev/null 2>&1 &
HOST_B=$!
cleanup_push "kill $HOST_B 2>/dev/null || true"
host_b_apart() { [ "$(readlink /proc/$HOST_B/ns/net)" != "$(readlink /proc/self/ns/net)" ]; }
wait_for 5 host_b_apart || fail "host B's network namespace did not appear"
on_b() { nsenter -t "$HOST_B" -n "$@"; }
ip link add veth-a type veth peer name veth-b netns "$HOST_B"
ip addr add 10.91.0.1/24 dev veth-a
ip link set veth-a up
on_b ip link set lo up
on_b ip addr add 10.91.0.2/24 dev veth-b
on_b ip link set veth-b up

export TGT_ADDR=10.91.0.1
start_tgtd 64

out=$(on_b timeout 20 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" discover -p 10.91.0.1 2>&1) ||
  { echo "$out"; fail "discovery from host B"; }
echo "$out"
grep -q "^10.91.0.1:3260,1 $IQN\$" <<<"$out" || fail "discovery from host B"
URL="iser://10.91.0.1/$IQN/1"
out=$(on_b timeout 20 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" ls "$URL" 2>&1) ||
  { echo "$out"; fail "ls over iSER from host B"; }
echo "$out"
grep -q "67108864\|64 MiB\|64.0 MiB" <<<"$out" || fail "ls over iSER from host B"
on_b timeout 60 "$SOFTRDMA_RUN" "$CLI" -i "$INITIATOR" bench "$URL" --rw randwrite --bs 64k \
  --qd 8 --time 1 --verify || fail "verified bench over iSER from host B"
# The RDMA connection went through TCP: tgtd's TCP listener for RDMA CM port 3260.
ss -ltn | grep -q ":23260 " || fail "no softrdma TCP listener on host A"
echo PASS
