# wait_listener NAMESPACE PORT: waits up to 10 s for a softrdma RDMA CM listener on PORT
# (its abstract socket shows in /proc/net/unix), so clients never race their server.
. "$(dirname "${BASH_SOURCE[0]}")/../harness/functions.sh"

softrdma_listening() {
  grep -q "@softrdma/$1/[46]/[^/]*/$2\$" /proc/net/unix
}

wait_listener() {
  wait_for 10 softrdma_listening "$1" "$2" || fail "no softrdma listener on port $2 after 10 s"
}
