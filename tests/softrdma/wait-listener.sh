# wait_listener NAMESPACE PORT: waits up to 10 s for a softrdma RDMA CM listener on PORT
# (its abstract socket shows in /proc/net/unix), so clients never race their server.
wait_listener() {
  for _ in $(seq 100); do
    grep -q "@softrdma/$1/[46]/[^/]*/$2\$" /proc/net/unix && return 0
    sleep 0.1
  done
  echo "FAIL: no softrdma listener on port $2 after 10 s" >&2
  return 1
}
