# capture.sh: a tshark capture of a test's iSCSI/TCP traffic on the loopback, and the questions
# the tests ask of it (bash library, sourced after set -euo pipefail).
#
#   capture_start PORT DIR     # returns once tshark is capturing tcp port PORT into DIR/cap.pcap
#   ... traffic ...
#   capture_stop               # also on the cleanup stack capture_start pushes to; safe twice
#   capture_fua_lbas           # "2048 4096": LBAs of WRITEs with the FUA bit, sorted
#   capture_commands 'FILTER'  # SCSI Command PDUs matching a display filter, e.g. $CAPTURE_WRITE
#   capture_count 'FILTER'     # frames matching a display filter
#   capture_assert_clean       # no malformed frames, no expert errors
#   capture_expect_durability yes|no "2048 4096" FLUSHES   # see below
#
# tshark dissects port PORT as iSCSI (it only guesses 3260), so SCSI CDBs are decoded.

. "$(dirname "${BASH_SOURCE[0]}")/functions.sh"

CAPTURE_SYNC='scsi_sbc.opcode == 0x35 || scsi_sbc.opcode == 0x91'  # SYNCHRONIZE CACHE(10/16)
CAPTURE_WRITE='scsi_sbc.opcode == 0x2a || scsi_sbc.opcode == 0x8a'  # WRITE(10/16)
CAPTURE_PID=
CAPTURE_PORT=
CAPTURE_FILE=

# tshark says "Capturing on" when it starts dumpcap, which opens the interface later: on a loaded
# machine a test's whole exchange ran in between and the capture held none of it (CI, twice). So
# both ends of a capture are proven by markers, connection attempts to the port from addresses
# no test's traffic comes from: the start sends one from 127.0.0.2 until the file shows it, the
# stop one from 127.0.0.3 and waits until the file shows it, so that what was sent before is in
# the file too (a fixed wait of 0.5 s did that before), each for up to 30 s.
capture_start() {
  CAPTURE_PORT=$1
  CAPTURE_FILE=$2/cap.pcap
  local err=$2/tshark.err
  requires tshark python3
  timeout 120 tshark -i lo -f "tcp port $CAPTURE_PORT" -w "$CAPTURE_FILE" 2>"$err" &
  CAPTURE_PID=$!
  cleanup_push capture_stop
  wait_for --pid "$CAPTURE_PID" 10 grep -q Capturing "$err" ||
    fail "tshark did not start capturing within 10 s: $(cat "$err")"
  capture_mark 127.0.0.2 || fail "the capture never showed its start marker: $(cat "$err")"
}

capture_stop() {
  [ -n "$CAPTURE_PID" ] || return 0
  capture_mark 127.0.0.3 || echo "capture.sh: the stop marker did not reach the capture" >&2
  kill -INT "$CAPTURE_PID" 2>/dev/null || true
  wait "$CAPTURE_PID" 2>/dev/null || true
  CAPTURE_PID=
}

# capture_mark ADDRESS: connection attempts to the port from ADDRESS until the capture file holds
# one; status 1 after 30 s or once tshark has ended. The file is still being written: tshark may
# complain of a cut-short last frame.
capture_mark() {
  local from=$1 end=$((SECONDS + 30))
  while ((SECONDS < end)) && kill -0 "$CAPTURE_PID" 2>/dev/null; do
    python3 - "$from" "$CAPTURE_PORT" <<'PY' || true
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
try:
    s.connect(("127.0.0.1", int(sys.argv[2])))
except OSError:
    pass
s.close()
PY
    [ -z "$(capture_decode -Y "ip.addr == $from")" ] || return 0
    sleep 0.2
  done
  return 1
}

capture_decode() {
  tshark -r "$CAPTURE_FILE" -d "tcp.port==$CAPTURE_PORT,iscsi" "$@" 2>/dev/null
}

capture_fua_lbas() {
  capture_decode -Y 'scsi_sbc.fua == 1' -T fields -e scsi_sbc.rdwr10.lba -e scsi_sbc.rdwr16.lba |
    tr -s ',\t' '\n\n' | sed '/^$/d' | sort -un | paste -sd ' '
}

# Responses repeat the command's opcode as a generated field: count only the commands.
capture_commands() {
  capture_count "iscsi.opcode == 0x01 && ($1)"
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

# capture_expect_durability DPOFUA LBAS FLUSHES: on a LUN with DPOFUA (yes), exactly the WRITEs
# at LBAS carry FUA and FLUSHES SYNCHRONIZE CACHE commands went out; without it (no), no WRITE
# carries FUA and each of those writes costs one SYNCHRONIZE CACHE more (FUA emulated).
capture_expect_durability() {
  local dpofua=$1 lbas=$2 flushes=$3 fua syncs
  fua=$(capture_fua_lbas)
  syncs=$(capture_commands "$CAPTURE_SYNC")
  echo "FUA on WRITEs at LBA: ${fua:-none}; SYNCHRONIZE CACHE commands: $syncs (DPOFUA: $dpofua)"
  if [ "$dpofua" = yes ]; then
    [ "$fua" = "$lbas" ] || fail "FUA bit on LBAs '$fua', expected '$lbas'"
  else
    [ -z "$fua" ] || fail "FUA bit sent to a LUN without DPOFUA"
    flushes=$((flushes + $(wc -w <<<"$lbas")))
  fi
  [ "$syncs" -eq "$flushes" ] || fail "expected $flushes SYNCHRONIZE CACHE commands, saw $syncs"
}
