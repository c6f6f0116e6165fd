# Checks of a SOFTRDMA_PCAP capture with tshark, sourced by the *-pcap.sh tests after tgt-lib.sh
# (which gives $WORK and functions.sh).
# No preference and no disabled protocol: Wireshark follows each connection from the CM MADs.

# decode_pcap FILE: writes $WORK/summary (one line per frame) and $WORK/detail (tshark -V of the
# iSER frames), and fails on a capture too small or holding a malformed frame.
decode_pcap() {
  timeout 60 tshark -r "$1" >"$WORK/summary" 2>/dev/null
  timeout 60 tshark -r "$1" -Y iser -V >"$WORK/detail" 2>/dev/null
  head -12 "$WORK/summary"
  echo "$(wc -l <"$WORK/summary") frames, $(stat -c %s "$1") bytes"
  [ "$(wc -l <"$WORK/summary")" -gt 10 ] || fail "capture holds too few frames"
  if grep -qi "malformed" "$WORK/summary"; then
    grep -i malformed "$WORK/summary" | head
    fail "malformed frames in the capture"
  fi
  # Every RC SEND Only belongs to an iSER connection Wireshark learnt from its CM exchange.
  local stray
  stray=$(timeout 60 tshark -r "$1" -Y "infiniband.bth.opcode == 4 && !iser" 2>/dev/null)
  if [ -n "$stray" ]; then
    head <<<"$stray"
    fail "RC SENDs not decoded as iSER"
  fi
}

# expect_summary TEXT...: each TEXT is in some frame's summary line.
expect_summary() {
  for what in "$@"; do
    grep -qF "$what" "$WORK/summary" || fail "tshark shows no \"$what\""
  done
}

# expect_detail LINE...: each LINE is a whole line of the -V decode (a protocol's subtree title).
expect_detail() {
  for what in "$@"; do
    grep -qxF "$what" "$WORK/detail" || fail "tshark -V shows no \"$what\""
  done
}
