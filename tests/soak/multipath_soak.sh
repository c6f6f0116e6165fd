#!/bin/bash
# multipath_soak.sh [--seconds S] [--seed N] [--frontends fuse,nbdkit] [--url-args ARGS]
#                   [--results FILE]
#
# The multipath soak (docs/multipath.md, "The soak"): verified writers through each frontend
# while the paths flap under them. A private tgtd serves one 64 MiB file-backed LUN at two
# portals (the second added with `tgtadm --op new --mode portal`); a path cutter
# (tests/harness/path_cutter_main.cc) stands in front of each, and the URL is
# iscsi://127.0.0.1:CUTTER_A/IQN/1?portal=127.0.0.1:CUTTER_B. For each frontend in turn:
#   fuse    `iser-connect mount URL MNT`, ledger-writer on MNT/lun1 (O_DIRECT);
#   nbdkit  `nbdkit iser URL`, ledger-writer on the NBD export of LUN 1;
# ledger-writer (tests/harness/ledger_writer.cc) runs 8 writer threads for S seconds, then reads
# every block back against its ledger of generation-stamped writes (lost, stale, doubled and
# corrupt writes show, not only errors). Meanwhile a flapper picks one of the two cutters at random
# every 2-5 s, cuts or stalls it (at random) and restores it 1-2 s later, one path at a time,
# until the writer has ended; the schedule comes from the seed (printed), the same for each
# frontend.
#
# It fails unless, for each frontend: ledger-writer exits 0 (no I/O error, no bad block); the
# flapper flapped at least 3 times; with multipath on, each path carried writes (more than 1 MiB
# through each cutter to the target during the run); and once the mount is unmounted (or nbdkit
# stopped) tgtd has no I_T nexus left. It prints the timeline of the flaps and of the initiator's
# path events, and the writers' summaries.
#
# Options (their defaults from the environment, so that `SOAK_SEED=N ctest -R soak_multipath`
# replays a failed run's schedule):
#   --seconds S      how long the writers write through each frontend (SOAK_SECONDS, default 25;
#                    the long soak: 600)
#   --seed N         the flap schedule's and the writers' seed (SOAK_SEED, default random)
#   --frontends L    fuse, nbdkit or fuse,nbdkit (default both, in that order)
#   --url-args ARGS  more URL arguments, e.g. multipath=off (one session that fails over to the
#                    other portal: both paths need not carry I/O then)
#   --results FILE   appends one JSON object a line per frontend: ledger-writer's figures plus
#                    frontend, config, flaps, cuts, stalls, and the bytes through each path
# Programs, from the environment (CTest passes them): ISER_CONNECT, NBDKIT_ISER_PLUGIN,
# LEDGER_WRITER, PATH_CUTTER. A missing program or tool fails the test; it never skips.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../harness/functions.sh"

usage() {
  sed -n '2,3p' "$0" | sed 's/^# //' >&2
  exit 2
}
seconds=${SOAK_SECONDS:-25}
seed=${SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
frontends=fuse,nbdkit
url_args=
results=
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case $1 in
    --seconds) seconds=$2 ;;
    --seed) seed=$2 ;;
    --frontends) frontends=$2 ;;
    --url-args) url_args=$2 ;;
    --results) results=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || fail "--seconds '$seconds': give whole seconds"
[[ $seed =~ ^[0-9]+$ ]] || fail "--seed '$seed': give a number"
[[ $frontends =~ ^(fuse|nbdkit)(,(fuse|nbdkit))?$ ]] || fail "--frontends: fuse, nbdkit or both"
program_given() {  # program_given VAR PROGRAM
  [ -x "${!1:-}" ] || fail "$1 must name the $2 program of a build with the tests (CTest passes it)"
}
program_given ISER_CONNECT iser-connect
program_given LEDGER_WRITER ledger-writer
program_given PATH_CUTTER path-cutter
config=multipath
if [[ $url_args == *multipath=off* ]]; then config=failover; fi

. "$HERE/../fuse/lib.sh"
if [[ $frontends == *nbdkit* ]]; then
  [ -f "${NBDKIT_ISER_PLUGIN:-}" ] || fail "NBDKIT_ISER_PLUGIN must name the nbdkit plugin"
  . "$HERE/../nbdkit/lib.sh" "$NBDKIT_ISER_PLUGIN"
  requires nbdinfo
fi
requires tgtadm python3 timeout fusermount3 mkfifo
[ -c /dev/fuse ] || fail "/dev/fuse is missing"

temp_dir WORK soak
# The test's own session table (nbdkit/lib.sh made one when sourced): mounts and nbdkit register
# there, never in the machine's.
export ISER_CONNECT_RUNTIME_DIR=${ISER_CONNECT_RUNTIME_DIR:-$WORK/run}
mkdir -p "$ISER_CONNECT_RUNTIME_DIR"
IQN=iqn.2026-11.test:soak
tgt_start
tgt_target 1 $IQN
tgt_lun 1 1 64M
P2=$(tgt_free_port)
tgt_adm --lld iscsi --op new --mode portal --param portal="127.0.0.1:$P2"

# --- the path cutters: path A in front of portal 1, B of portal 2 ---------------------------
# Each reads its commands from a fifo the script holds open (CUTTER_FD) and appends its answers,
# one a line, to $WORK/cutter-I.out.
NAMES=(A B)
CUTTER_PID=()
CUTTER_FD=()
CUTTER_PORT=()
cutter_start() {  # cutter_start I TARGET
  local i=$1 fd
  mkfifo "$WORK/cutter-$i.in"
  "$PATH_CUTTER" "$2" <"$WORK/cutter-$i.in" >"$WORK/cutter-$i.out" 2>"$WORK/cutter-$i.err" &
  CUTTER_PID[i]=$!
  exec {fd}>"$WORK/cutter-$i.in"
  CUTTER_FD[i]=$fd
  wait_for --pid "${CUTTER_PID[i]}" 10 test -s "$WORK/cutter-$i.out" ||
    fail "path-cutter $2 did not start: $(cat "$WORK/cutter-$i.err")"
  CUTTER_PORT[i]=$(head -1 "$WORK/cutter-$i.out")
}
cutter_stop() {
  local i fd
  for i in "${!CUTTER_PID[@]}"; do
    fd=${CUTTER_FD[i]}
    { echo quit >&"$fd"; } 2>/dev/null || true
    exec {fd}>&-
    wait_for 5 exited "${CUTTER_PID[i]}" || kill -9 "${CUTTER_PID[i]}" 2>/dev/null || true
  done
}
lines_past() { [ "$(wc -l <"$1")" -gt "$2" ]; }
# cutter_do I COMMAND: sends COMMAND, waits for its answer (CUTTER_ANSWER); anything but "ok"
# fails, except for stats.
cutter_do() {
  local i=$1 out=$WORK/cutter-$1.out n
  n=$(wc -l <"$out")
  echo "$2" >&"${CUTTER_FD[i]}"
  wait_for --pid "${CUTTER_PID[i]}" 10 lines_past "$out" "$n" ||
    fail "path-cutter ${NAMES[i]} did not answer '$2': $(cat "$WORK/cutter-$i.err")"
  CUTTER_ANSWER=$(sed -n "$((n + 1))p" "$out")
  [ "$2" = stats ] || [ "$CUTTER_ANSWER" = ok ] ||
    fail "path-cutter ${NAMES[i]}: $2: $CUTTER_ANSWER"
}
cleanup_push cutter_stop
cutter_start 0 "127.0.0.1:$TGT_PORT"
cutter_start 1 "127.0.0.1:$P2"
URL="iscsi://127.0.0.1:${CUTTER_PORT[0]}/$IQN/1?portal=127.0.0.1:${CUTTER_PORT[1]}"
[ -z "$url_args" ] || URL="$URL&$url_args"

# --- the flapper -------------------------------------------------------------------------------
now_ms() {
  local t=${EPOCHREALTIME//[!0-9]/}
  echo $((t / 1000))
}
# sleep_until MS: sleeps until the time MS (now_ms's clock); status 1 at once when the stop
# file exists.
sleep_until() {
  while [ ! -e "$WORK/stop" ]; do
    [ "$(now_ms)" -lt "$1" ] || return 0
    sleep 0.05
  done
  return 1
}
# flapper EVENTS: until $WORK/stop exists, every 2-5 s (from one flap's start to the next) cuts
# or stalls path A or B and restores it 1-2 s later; each step a line "EPOCH TEXT" in EVENTS. The
# choices come from bash's RANDOM seeded with the seed: the same schedule each run.
flapper() {
  local events=$1 n=0 next at when path action down early
  RANDOM=$seed
  next=$(($(now_ms) + 2000 + RANDOM % 3001))
  while sleep_until "$next"; do
    path=$((RANDOM % 2))
    action="cut"
    [ $((RANDOM % 2)) = 0 ] || action=stall
    down=$((1000 + RANDOM % 1001))
    at=$(now_ms)
    when=$EPOCHREALTIME
    cutter_do "$path" "$action"
    n=$((n + 1))
    printf '%s flap %d: path %s (port %s) %s for %d.%03d s\n' "$when" "$n" \
      "${NAMES[path]}" "${CUTTER_PORT[path]}" "$action" $((down / 1000)) $((down % 1000)) >>"$events"
    early=
    sleep_until $((at + down)) || early=" (early: the writers have ended)"
    when=$EPOCHREALTIME
    cutter_do "$path" restore
    echo "$when path ${NAMES[path]} restored$early" >>"$events"
    next=$((at + 2000 + RANDOM % 3001))
  done
}

# --- the initiator's log, stamped ----------------------------------------------------------------
# stamp_log LOG OUT: in the background (STAMP_PID), copies each line of LOG as it is written to
# OUT, prefixed with the time it appeared (to 50 ms), for the timeline.
stamp_log() {
  python3 -u - "$1" "$2" <<'PY' &
import os, sys, time
path, out = sys.argv[1], open(sys.argv[2], "w", buffering=1)
while not os.path.exists(path):
    time.sleep(0.05)
f, part = open(path, errors="replace"), ""
while True:
    line = f.readline()
    if not line:
        time.sleep(0.05)
        continue
    part += line
    if part.endswith("\n"):
        out.write(f"{time.time():.6f} {part}")
        part = ""
PY
  STAMP_PID=$!
  cleanup_push "kill $STAMP_PID 2>/dev/null || true"
}
# The initiator's lines worth a place in the timeline: paths lost and back, sessions lost,
# recovered and fenced, I/O aborted or failed.
PATH_EVENTS='path [0-9]+ to |lost|recover|fence|ended the lost|left out|abort|timed out|fail'

# I_T nexuses tgtd has.
nexuses() { tgtadm --lld iscsi --op show --mode target | grep -c "I_T nexus:" || true; }
no_nexus() { [ "$(nexuses)" = 0 ]; }

to_target() { # to_target I: bytes path I has relayed to the target so far
  cutter_do "$1" stats
  echo "${CUTTER_ANSWER##*to_target }" | cut -d' ' -f1
}

FAILED=()
# soak_run FRONTEND TARGET LOG: ledger-writer on TARGET under the flapper; checks and prints
# what the header says. LOG is the initiator's log (stamped for the timeline).
soak_run() {
  local frontend=$1 target=$2 log=$3 out=$WORK/$1 rc=0 start flaps cuts stalls i
  local before=() moved=()
  for i in 0 1; do
    cutter_do $i restore
    before[i]=$(to_target $i)
  done
  stamp_log "$log" "$out.log.stamped"
  local stamper=$STAMP_PID
  rm -f "$WORK/stop"
  : >"$out.events"
  start=$EPOCHREALTIME
  timeout -k 10 $((seconds + 60)) "$LEDGER_WRITER" --threads 8 --seconds "$seconds" \
    --seed "$seed" --label "$frontend $config" --json "$target" >"$out.writer" \
    2>"$out.writer.err" &
  local writer=$!
  flapper "$out.events" 2>"$out.flapper.err" &
  local flapper_pid=$!
  wait $writer || rc=$?
  touch "$WORK/stop"
  wait $flapper_pid || fail "$frontend: the flapper failed: $(cat "$out.flapper.err")"
  for i in 0 1; do moved[i]=$(($(to_target $i) - before[i])); done
  sleep 0.2
  kill "$stamper" 2>/dev/null || true

  flaps=$(grep -c " flap " "$out.events" || true)
  cuts=$(grep -c " cut for " "$out.events" || true)
  stalls=$(grep -c " stall for " "$out.events" || true)
  echo "--- $frontend ($config), seed $seed: timeline (s since the writers started) ---"
  { cat "$out.events"; grep -E "^[0-9.]+ .*($PATH_EVENTS)" "$out.log.stamped" || true; } |
    sort -n -s -k1,1 |
    awk -v s="${start//,/.}" '
      # The first few failed commands say what failed; the rest are counted.
      /I\/O error|[A-Z]+(\([0-9]+\))? on LUN [0-9]+/ && ++errors > 5 { next }
      { t = $1; $1 = ""; printf "%8.2f %s\n", t - s, $0 }
      END { if (errors > 5) printf "%8s ... and %d more failed commands in the log\n", "", errors - 5 }'
  if [ -s "$out.writer.err" ]; then
    echo "--- ledger-writer's messages ---"
    cat "$out.writer.err"
  fi
  echo "--- $frontend ($config): $flaps flaps ($cuts cuts, $stalls stalls); to the target through" \
    "path A $((moved[0] >> 10)) KiB, path B $((moved[1] >> 10)) KiB ---"
  grep -v '^{' "$out.writer" || true

  local summary
  summary=$(grep '^{' "$out.writer" || true)
  if [ -n "$results" ]; then
    python3 - "$summary" "$frontend" "$config" "$flaps" "$cuts" "$stalls" "${moved[0]}" \
      "${moved[1]}" "$rc" "$seed" "$URL" >>"$results" <<'PY'
import json, sys
w = json.loads(sys.argv[1]) if sys.argv[1] else {}
keys = ["frontend", "config", "flaps", "cuts", "stalls", "path_a_bytes", "path_b_bytes",
        "writer_exit", "flap_seed", "url"]
extra = dict(zip(keys, sys.argv[2:]))
for k in keys[2:9]:
    extra[k] = int(extra[k])
print(json.dumps({**w, **extra}))
PY
  fi
  # Every check of the run, so that one failure does not hide another.
  local bad=()
  case $rc in
    0) ;;
    124 | 137) bad+=("ledger-writer did not end within $((seconds + 60)) s: an I/O hung") ;;
    *) bad+=("ledger-writer exited $rc (I/O errors or bad blocks, above)") ;;
  esac
  [ -n "$summary" ] || bad+=("ledger-writer printed no figures")
  [ "$flaps" -ge 3 ] || bad+=("only $flaps flaps in the run: the paths were hardly tested")
  if [ "$config" = multipath ]; then
    for i in 0 1; do
      [ "${moved[i]}" -gt $((1 << 20)) ] ||
        bad+=("path ${NAMES[i]} carried only ${moved[i]} bytes to the target")
    done
  fi
  for i in "${bad[@]}"; do FAILED+=("$frontend: $i"); done
  [ ${#bad[@]} -eq 0 ] && echo "$frontend ($config): ok"
  return 0
}

echo "soak: $seconds s of 8 verified writers per frontend ($frontends), a flap every 2-5 s;" \
  "seed $seed (SOAK_SEED=$seed or --seed $seed replays the schedule)"
echo "tgtd portals 127.0.0.1:$TGT_PORT and 127.0.0.1:$P2; path A: cutter" \
  "127.0.0.1:${CUTTER_PORT[0]} -> portal 1, path B: cutter 127.0.0.1:${CUTTER_PORT[1]} -> portal 2"
echo "URL $URL"

if [[ $frontends == *fuse* ]]; then
  MNT=$WORK/mnt
  mkdir "$MNT"
  cleanup_push fuse_cleanup
  "$ISER_CONNECT" mount --log-level info "$URL" "$MNT" -f 2>"$WORK/mount.log" &
  MOUNT_PID=$!
  FUSE_MOUNTS+=("$MNT")
  FUSE_PIDS+=("$MOUNT_PID")
  wait_for --pid "$MOUNT_PID" 30 fuse_mounted "$MNT" fuse.iser-connect ||
    fail "mount of $URL failed: $(cat "$WORK/mount.log")"
  soak_run fuse "$MNT/lun1" "$WORK/mount.log"
  fusermount3 -u "$MNT" || fail "fusermount3 -u $MNT"
  wait_for 30 exited "$MOUNT_PID" || fail "the mount is still running 30 s after the unmount"
  wait "$MOUNT_PID" || FAILED+=("fuse: the mount exited $? (its log: $WORK/mount.log)")
  wait_for 10 no_nexus || FAILED+=("fuse: tgtd still has $(nexuses) I_T nexuses after the unmount")
fi

if [[ $frontends == *nbdkit* ]]; then
  # nbdkit must outlive the writers and their read-back (lib.sh bounds it at 600 s otherwise).
  NBD_TIMEOUT=$((seconds + 600)) nbd_start "$URL"
  [ "$(timeout 60 nbdinfo --size "$(nbd_uri 1)")" = $((64 << 20)) ] ||
    fail "nbdkit does not serve LUN 1 (64 MiB): $(cat "$NBD_DIR/log")"
  soak_run nbdkit "$(nbd_uri 1)" "$NBD_DIR/log"
  nbd_stop || FAILED+=("nbdkit: a sanitizer report (above)")
  wait_for 10 no_nexus || FAILED+=("nbdkit: tgtd still has $(nexuses) I_T nexuses after it stopped")
fi

if [ ${#FAILED[@]} -gt 0 ]; then
  [ -z "${MOUNT_PID:-}" ] || { echo "--- the mount's log (last 40 lines) ---"; tail -40 "$WORK/mount.log"; }
  printf 'FAIL: %s\n' "${FAILED[@]}" >&2
  fail "the soak failed (seed $seed)"
fi
echo PASS
