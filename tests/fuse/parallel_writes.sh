#!/bin/bash
# Direct writes to a LUN file run side by side: the kernel runs direct writes to one FUSE file one
# at a time unless the open's reply allows parallel ones (frontends/fuse/open_flags.h), and then a
# write waiting on a slow or recovering path holds every writer of the file. With tgtd stopped
# (SIGSTOP: the kernel still takes what is sent to it, tgtd reads and answers nothing), 8 threads
# each start one O_DIRECT write of 4 KiB; all 8 must reach tgtd's sockets, where one at a time
# sends 1. Checked for a flat mount and for a file of the session daemon's tree, which open LUN
# files through the same code but mount their own sessions; the writes must land once tgtd runs.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sessions_lib.sh"
requires dd cmp ss python3
sessions_setup
T1=iqn.2026-11.test:t1
T2=iqn.2026-11.test:t2
tgt_target 1 "$T1"
tgt_lun 1 1 16M
tgt_target 2 "$T2"
tgt_lun 2 1 16M
WRITERS=8

stopped=
writer=
# tgtd runs again and no writer is left behind, whatever failed.
resume() {
  if [ -n "$writer" ]; then kill -9 "$writer" 2>/dev/null || true; fi
  if [ -n "$stopped" ]; then kill -CONT "$TGT_PID" 2>/dev/null || true; fi
  stopped=
}
cleanup_push resume

# The bytes tgtd has not read from its connections: each 4 KiB write is one PDU with its data
# (ImmediateData), so 8 of them are at least 32 KiB, one at a time stays under 5 KiB.
unread_bytes() {
  ss -tnH state established "( sport = :$TGT_PORT )" | awk '{n += $1} END {print n + 0}'
}
all_sent() { [ "$(unread_bytes)" -ge $((WRITERS * 4096)) ]; }

# parallel_writes FILE LUN_FILE: the 8 writes, all sent at once, then their blocks on the LUN.
# The writer opens the file before tgtd stops (an open reads the LUN's capacity), says so, and
# writes once it sees tgtd stopped.
parallel_writes() {
  local file=$1 lun_file=$2 i
  for i in $(seq 0 $((WRITERS - 1))); do
    head -c 4096 /dev/urandom >"$FUSE_DIR/block.$i"
  done
  : >"$FUSE_DIR/writer.out"
  python3 - "$file" "$TGT_PID" "$FUSE_DIR" "$WRITERS" >"$FUSE_DIR/writer.out" 2>&1 <<'PY' &
import mmap, os, sys, threading, time
path, tgt_pid, work, writers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
blocks = []
for i in range(writers):
    b = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    b.write(open("%s/block.%d" % (work, i), "rb").read())
    blocks.append(b)
print("open", flush=True)
deadline = time.monotonic() + 30
while open("/proc/%s/stat" % tgt_pid).read().rsplit(")", 1)[1].split()[0] != "T":
    if time.monotonic() > deadline:
        sys.exit("tgtd was not stopped within 30 s")
    time.sleep(0.01)
errors = []
def write(i):
    try:
        if os.pwrite(fd, blocks[i], i * 8192) != 4096:
            errors.append("short write %d" % i)
    except OSError as e:
        errors.append("write %d: %s" % (i, e))
threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    sys.exit("; ".join(errors))
PY
  writer=$!
  wait_for --pid "$writer" 30 grep -q "^open" "$FUSE_DIR/writer.out" ||
    fail "the writer did not open $file: $(cat "$FUSE_DIR/writer.out")"
  stopped=1
  kill -STOP "$TGT_PID"
  wait_for 20 all_sent ||
    fail "$file: tgtd was sent $(unread_bytes) bytes, not the $WRITERS direct writes at once"
  kill -CONT "$TGT_PID"
  stopped=
  wait "$writer" || fail "writes to $file: $(cat "$FUSE_DIR/writer.out")"
  writer=
  for i in $(seq 0 $((WRITERS - 1))); do
    cmp -n 4096 "$FUSE_DIR/block.$i" <(dd if="$lun_file" bs=4k skip=$((i * 2)) count=1 \
      status=none) || fail "block $((i * 2)) of $file is not on the LUN"
  done
  echo "$file: $WRITERS direct writes sent at once, all on the LUN: ok"
}

fuse_mount "$(sessions_url 1)" "$MNT"
parallel_writes "$MNT/lun1" "$(tgt_lun_file 1 1)"
ic login "$(sessions_url 2)" || fail "login to $T2"
parallel_writes "$ROOT/$T2/lun1" "$(tgt_lun_file 2 1)"
echo PASS
