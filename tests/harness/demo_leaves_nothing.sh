#!/bin/bash
# demo_leaves_nothing.sh: scripts/demo, past its build step (ISER_DEMO_BUILD: the build tree
# under test), in a network namespace of its own as the demo runs itself, must succeed and leave
# no process behind: not its tgtd, not the session daemon, not an unmount guard, not nbdkit.
# Every process the demo starts inherits a marker in its environment; any live one after the demo
# is a failure (and is killed, so the failure leaks nothing either). The build tree must have the
# nbdkit plugin, which the demo serves a LUN with.
set -euo pipefail
HARNESS=$(cd "$(dirname "$0")" && pwd)
. "$HARNESS/functions.sh"
REPO=$(cd "$HARNESS/../.." && pwd)
[ -n "${ISER_DEMO_BUILD:-}" ] && [ -x "$ISER_DEMO_BUILD/cli/iser-connect" ] ||
  fail "ISER_DEMO_BUILD must name a build tree with cli/iser-connect"
[ -f "$ISER_DEMO_BUILD/frontends/nbdkit/nbdkit-iser-plugin.so" ] ||
  fail "$ISER_DEMO_BUILD has no nbdkit plugin (frontends/nbdkit/nbdkit-iser-plugin.so)"
[ -n "${SOFTRDMA_RUN:-}" ] && [ -x "$SOFTRDMA_RUN" ] || fail "SOFTRDMA_RUN must name softrdma-run"
requires tgtd tgtadm unshare ip timeout nbdkit nbdinfo nbdcopy
temp_dir WORK demo-test
MARK=iser-demo-test-$$-$RANDOM

# The live (not zombie) processes carrying the marker.
marked() {
  local f
  for f in $(grep -lzxF "ISER_DEMO_MARK=$MARK" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f%/environ}
    [ "$(awk '{print $3}' "$f/stat" 2>/dev/null)" = Z ] || echo "${f#/proc/}"
  done
}
nothing_marked() {
  [ -z "$(marked)" ]
}
kill_marked() {
  local p
  for p in $(marked); do kill -9 "$p" 2>/dev/null || true; done
}
cleanup_push kill_marked

rc=0
ISER_DEMO_MARK=$MARK ISER_DEMO_BUILD=$ISER_DEMO_BUILD SOFTRDMA_STRICT=0 \
  timeout 500 "$REPO/tests/harness/iser-netns" "$SOFTRDMA_RUN" "$REPO/scripts/demo" \
  >"$WORK/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "scripts/demo exited with $rc: $(tail -40 "$WORK/out")"
grep -q "16 MiB read back equal" "$WORK/out" || fail "the demo wrote no file: $(cat "$WORK/out")"
grep -q "Logout of \[target: iqn.2026-11.io.iser-connect:demo-rdma\] successful" "$WORK/out" ||
  fail "the demo did not log out: $(cat "$WORK/out")"
grep -q "16 MiB written with nbdcopy, read back equal" "$WORK/out" ||
  fail "the demo did not serve a LUN with nbdkit: $(cat "$WORK/out")"
echo "scripts/demo: exit 0, a file written and read back, logged out, a LUN served by nbdkit: ok"

wait_for 10 nothing_marked || {
  left=$(marked)
  fail "scripts/demo left processes running: $(ps -o pid,args -p "${left//$'\n'/,}")"
}
echo "scripts/demo left no process: ok"
echo PASS
