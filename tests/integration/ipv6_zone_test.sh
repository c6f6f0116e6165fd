#!/usr/bin/env bash
# IPv6 link-local portals end to end. In a network namespace of its own, fe80::1 on one end of a
# veth pair and a tgtd listening on [fe80::1%LINK] only: discover -p '[fe80::1%LINK]:PORT' and
# ls 'iscsi://[fe80::1%25LINK]:PORT/IQN' (RFC 6874) connect through the zone and print it as
# iscsiadm does; a bare % before the zone in a URL is refused with the %25 form; the same address
# without its zone cannot be reached; discover -o new records the portal with its zone (file name
# and node.conn[0].address) and node finds it by it.
# Usage: ipv6_zone_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$(readlink -f "$1")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
if [ "${ISER_TEST_NETNS:-}" != 1 ]; then
  requires unshare timeout
  opts=-n
  [ "$(id -u)" = 0 ] || opts=-rn
  ISER_TEST_NETNS=1 exec timeout 240 unshare $opts bash "$0" "$@"
fi
. "$here/../harness/tgt.sh"
requires ip
ip link set lo up || fail "cannot bring up loopback"
link=zone0
ip link add "$link" type veth peer name "${link}p" || fail "cannot create a veth pair"
ip link set "${link}p" up
ip link set "$link" up
# nodad: usable at once, no duplicate address detection to wait for.
ip addr add fe80::1/64 dev "$link" nodad || fail "cannot add fe80::1 to $link"

TGT_ADDR="fe80::1%$link"
tgt_start
iqn=iqn.2026-11.io.iser-connect.test:zone
tgt_target 1 "$iqn"
tgt_lun 1 1 8M
portal="[fe80::1%$link]:$TGT_PORT"
temp_dir work zone

out=$(timeout 30 "$cli" discover -p "$portal" 2>&1) || fail "discover -p $portal: $out"
check "discover -p '$portal' prints the portal with its zone" test "$out" = "$portal,1 $iqn"

out=$(timeout 30 "$cli" ls "iscsi://[fe80::1%25$link]:$TGT_PORT/$iqn" 2>&1) ||
  fail "ls iscsi://[fe80::1%25$link]:$TGT_PORT/$iqn: $out"
check "ls through the URL's zone names the portal with it" \
  grep -qxF "Target: $iqn ($portal,1)" <<<"$out"
check "ls through the URL's zone reads the LUN's size" grep -qF "(8388608 bytes)" <<<"$out"
expect_exit 7 "write .fe80::1%25$link.:$TGT_PORT" "$cli" ls "iscsi://[fe80::1%$link]:$TGT_PORT/$iqn"
expect_exit 5 "fe80::1" timeout 30 "$cli" ls "iscsi://[fe80::1]:$TGT_PORT/$iqn"
expect_exit 7 "bad zone" "$cli" discover -p "[fe80::1%$link/x]:$TGT_PORT"

cfg=$work/cfg
out=$(timeout 30 "$cli" discover -p "$portal" -o new --config-dir "$cfg" 2>&1) ||
  fail "discover -o new: $out"
file="$cfg/nodes/$iqn/[fe80::1%$link],$TGT_PORT,1"
check "the record's file name holds the zone" test -f "$file"
check "the record's address holds the zone" grep -qxF "node.conn[0].address = fe80::1%$link" "$file"
out=$("$cli" node --config-dir "$cfg" 2>&1) || fail "node: $out"
check "node lists the record with its zone" test "$out" = "$portal,1 $iqn"
out=$("$cli" node --config-dir "$cfg" -p "$portal" 2>&1) || fail "node -p $portal: $out"
check "node -p '$portal' shows that record" grep -qxF "node.conn[0].address = fe80::1%$link" <<<"$out"
expect_exit 21 "no record" "$cli" node --config-dir "$cfg" -p "[fe80::1]:$TGT_PORT"
checks_done
