# capture.sh: a tshark capture of a test's iSCSI/TCP traffic on the loopback, and the questions
# the tests ask of it (bash library, sourced after set -euo pipefail; the caller defines fail).
#
#   capture_start PORT DIR     # returns once tshark is capturing tcp port PORT into DIR/cap.pcap
#   ... traffic ...
#   capture_stop               # also safe to call from an EXIT trap, or twice
#   capture_fua_lbas           # "2048 4096 ": LBAs of WRITEs with the FUA bit, sorted
#   capture_count 'FILTER'     # frames matching a display filter
#   capture_assert_clean       # no malformed frames, no expert errors
#
# tshark dissects port PORT as iSCSI (it only guesses 3260), so SCSI CDBs are decoded.

CAPTURE_PID=
CAPTURE_PORT=
CAPTURE_FILE=

capture_start() {
  CAPTURE_PORT=$1
  CAPTURE_FILE=$2/cap.pcap
  local err=$2/tshark.err i
  command -v tshark >/dev/null || fail "tshark is not installed (run scripts/deps)"
  timeout 120 tshark -i lo -f "tcp port $CAPTURE_PORT" -w "$CAPTURE_FILE" 2>"$err" &
  CAPTURE_PID=$!
  for i in $(seq 1 100); do
    grep -q Capturing "$err" && return 0
    kill -0 "$CAPTURE_PID" 2>/dev/null || fail "tshark: $(cat "$err")"
    sleep 0.1
  done
  fail "tshark did not start capturing within 10 s: $(cat "$err")"
}

capture_stop() {
  [ -n "$CAPTURE_PID" ] || return 0
  # The last frames may still be in flight on the loopback.
  sleep 0.5
  kill -INT "$CAPTURE_PID" 2>/dev/null || true
  wait "$CAPTURE_PID" 2>/dev/null || true
  CAPTURE_PID=
}

capture_decode() {
  tshark -r "$CAPTURE_FILE" -d "tcp.port==$CAPTURE_PORT,iscsi" "$@" 2>/dev/null
}

capture_fua_lbas() {
  capture_decode -Y 'scsi_sbc.fua == 1' -T fields -e scsi_sbc.rdwr10.lba -e scsi_sbc.rdwr16.lba |
    tr -s ',\t' '\n\n' | sed '/^$/d' | sort -un | tr '\n' ' '
}

capture_count() {
  capture_decode -Y "$1" | wc -l
}

capture_assert_clean() {
  local filter='_ws.malformed || _ws.expert.severity >= "error"'
  [ "$(capture_count "$filter")" -eq 0 ] || {
    capture_decode -Y "$filter" >&2
    fail "the capture has malformed frames or expert errors"
  }
}
