#!/usr/bin/env bash
# End-to-end test of the iser-connect CLI against a real tgtd: discovery output (iscsiadm
# format and JSON), ls, bench with verification, and the exit codes scripts rely on.
# Usage: cli_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
. "$here/../harness/tgt.sh"

# --version and -V: the CMake project version, and the git commit when built from a checkout.
project_version=$(sed -n 's/^project(iser-connect VERSION \([0-9.]*\).*/\1/p' "$here/../../CMakeLists.txt")
for flag in --version -V; do
  out=$("$cli" $flag)
  echo "$out"
  check "$flag prints the version" \
    grep -Eqx "iser-connect $project_version( \(git [0-9a-f]+(-dirty)?\))?" <<<"$out"
done

tgt_start
iqn=iqn.2026-11.io.iser-connect.test:cli
tgt_target 1 $iqn
tgt_target 2 $iqn-chap
tgt_lun 1 1 32M
tgt_lun 1 2 32M --blocksize=4096 --params thin_provisioning=1
tgt_lun 2 1 16M
tgt_chap 2 alice alice-secret-1
portal=127.0.0.1:$TGT_PORT

out=$(timeout 30 "$cli" discover -p "$portal")
echo "$out"
check "discover prints iscsiadm lines" grep -qx "$portal,1 $iqn" <<<"$out"
check "discover lists both targets" test "$(wc -l <<<"$out")" -eq 2
json=$(timeout 30 "$cli" discover -p "$portal" --json)
check "discover --json is valid JSON" python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d)==2 and d[0]["portals"][0]["port"]=='"$TGT_PORT" "$json"

out=$(timeout 30 "$cli" ls "iscsi://$portal/$iqn")
echo "$out"
check "ls shows LUN 1 size" grep -q "size 32.0 MiB (33554432 bytes), blocks 512 logical" <<<"$out"
check "ls shows LUN 2 4096-byte blocks and thin" grep -q "blocks 4096 logical" <<<"$out"
check "ls shows thin provisioning" grep -q "provisioning thin" <<<"$out"
json=$(timeout 30 "$cli" ls "iscsi://$portal/$iqn" --json)
check "ls --json has the LUNs" python3 -c '
import json,sys
d=json.loads(sys.argv[1]); luns={l["lun"]:l for l in d[0]["luns"]}
assert luns[1]["size"]==33554432 and luns[2]["logical_block_size"]==4096 and luns[2]["thin"]
assert luns[0]["type"]=="STORAGE_ARRAY_CONTROLLER"
assert d[0]["portal"]=={"address":"127.0.0.1","port":'"$TGT_PORT"',"tpgt":1}, d[0]' "$json"

out=$(timeout 60 "$cli" bench "iscsi://$portal/$iqn/1" --rw randwrite --bs 4k --qd 32 --time 2 --verify --json)
echo "$out"
check "bench randwrite --verify checks data and finds none bad" python3 -c '
import json,sys; d=json.loads(sys.argv[1]); assert d["ios"]>0 and d["verified_units"]>0 and d["bad_units"]==0' "$out"
# tgtd greets each new login with UNIT ATTENTION 29/00, which the session retries: retried
# commands need not be 0.
check "bench --json reports the session's recoveries: none on a steady target" python3 -c '
import json,sys; d=json.loads(sys.argv[1])
assert d["recoveries"]==0 and d["longest_recovery_s"]==0 and d["replayed_tasks"]==0, d
assert isinstance(d["retried_commands"], int), d
assert d["datamover"] in ("io_uring", "epoll"), d
assert d["portal"]=={"address":"127.0.0.1","port":'"$TGT_PORT"',"tpgt":1}, d' "$out"
out=$(timeout 60 "$cli" bench "iscsi://$portal/$iqn/2" --rw read --bs 512k --qd 8 --time 2 --verify --size 16m)
echo "$out"
check "bench read --verify on the 4 KiB LUN" grep -q "0 bad" <<<"$out"
check "bench prints the session's recoveries" \
  grep -Eq "session: 0 recoveries \(longest 0.0 s\), 0 tasks replayed, [0-9]+ commands retried" <<<"$out"

out=$(timeout 60 "$cli" bench "iscsi://$portal/$iqn/1" --rw randrw --bs 4k --qd 32 --time 2 --verify --json)
echo "$out"
check "bench randrw --verify: reads during the run and the read-back of the whole range are good" \
  python3 -c '
import json,sys; d=json.loads(sys.argv[1])
assert d["read_ios"]>0 and d["write_ios"]>0 and d["bad_units"]==0
assert d["verified_units"]>=33554432//512, d["verified_units"]' "$out"
out=$(timeout 60 "$cli" bench "iscsi://$portal/$iqn/1" --rw randrw --bs 4k --qd 16 --size 64k --time 2 --verify --json)
echo "$out"
check "bench randrw --verify with as many I/Os in flight as blocks" python3 -c '
import json,sys; d=json.loads(sys.argv[1]); assert d["ios"]>100 and d["bad_units"]==0' "$out"
expect_exit 7 "fewer than --qd 16" "$cli" bench "iscsi://$portal/$iqn/1" --qd 16 --size 60k --verify --time 1

# Bad sizes are invalid arguments (7) found before connecting: the same command with good
# options fails to connect to the closed port (5).
unused="iscsi://127.0.0.1:$(tgt_free_port)/$iqn/1"
expect_exit 5 "refused" "$cli" bench "$unused" --bs 4k --size 1m --time 1
expect_exit 7 "size '-1': not a size" "$cli" bench "$unused" --size -1
# A URL without its scheme, or with one slash, is told what a URL looks like, not "bad port".
expect_exit 7 "'127.0.0.1:3260/iqn.x' is neither a portal \\(HOST\\[:PORT\\]\\) nor a URL: a URL looks like" \
  "$cli" ls 127.0.0.1:3260/iqn.x
expect_exit 7 "bad URL 'iscsi:/127.0.0.1/iqn.x': two slashes follow the scheme" "$cli" ls iscsi:/127.0.0.1/iqn.x
expect_exit 7 "size '17179869184g': too large" "$cli" bench "$unused" --size 17179869184g
expect_exit 7 "size '18446744073709551616': too large" "$cli" bench "$unused" --size 18446744073709551616
expect_exit 7 "size '': empty" "$cli" bench "$unused" --size ""
expect_exit 7 "size '0': must be at least 4.0 KiB" "$cli" bench "$unused" --size 0
expect_exit 7 "size '1k': must be at least 4.0 KiB" "$cli" bench "$unused" --size 1k
expect_exit 7 "size '4z': unknown unit" "$cli" bench "$unused" --size 4z

# iscsiadm's habits get the iser-connect command that does it; every parser error has the prefix.
expect_exit 7 "^iser-connect: unknown subcommand 'frobnicate'; the subcommands: discover, ls, .*help$" "$cli" frobnicate
expect_exit 7 "^iser-connect: iscsiadm's -m node is a subcommand here: iser-connect login -T IQN" \
  "$cli" -m node -T "$iqn" -p "$portal" -l
expect_exit 7 "iser-connect logout -r SID" "$cli" -m session -r 1 -u
expect_exit 7 "node only edits records: iser-connect login" "$cli" node -T "$iqn" --login
expect_exit 7 "^iser-connect: .*--qd.* \\(iser-connect bench --help\\)$" "$cli" bench "$unused" --qd nine
expect_exit 7 "^iser-connect: --type: isns not in" "$cli" discover -t isns -p "$portal"
expect_exit 0 "^$portal,1 $iqn$" "$cli" discover -t st -p "$portal"
expect_exit 0 "^$portal,1 $iqn$" "$cli" discover -t sendtargets -p "$portal"
expect_exit 0 "^Usage: iser-connect \\[OPTIONS\\] SUBCOMMAND" "$cli" help
expect_exit 0 "^Usage: iser-connect logout" "$cli" help logout
expect_exit 7 "unknown subcommand 'frobnicate'" "$cli" help frobnicate
expect_exit 0 "^iqn\\.2026-11\\.io\\.iser-connect:" "$cli" iname
expect_exit 0 "^iqn\\.2026-11\\.test:me$" "$cli" iname -i iqn.2026-11.test:me
expect_exit 7 "bs '0': must be between 1 B and 64.0 MiB" "$cli" bench "$unused" --bs 0
expect_exit 7 "bs '128m': must be between" "$cli" bench "$unused" --bs 128m
expect_exit 7 "bs '-512': not a size" "$cli" bench "$unused" --bs -512
expect_exit 7 "bs '4k4': unknown unit" "$cli" bench "$unused" --bs 4k4
expect_exit 7 "bs '1000': --verify needs a multiple of 512" "$cli" bench "$unused" --bs 1000 --verify
expect_exit 7 "qd: Value -1 not in range" "$cli" bench "$unused" --qd -1
expect_exit 7 "size '17179869184g': too large" "$cli" bench "iscsi://$portal/$iqn/1" --size 17179869184g

# Durations (--time, --login-timeout and the recovery settings, as options and as URL
# arguments) are checked before connecting too, by the same parser, on every subcommand that
# opens a session.
temp_dir mnt cli-mount
expect_exit 7 "time '1e300': not a number of seconds" "$cli" bench "$unused" --time 1e300
expect_exit 7 "time '0': must be between 0.001 and 31536000 seconds" "$cli" bench "$unused" --time 0
expect_exit 7 "time '31536001': must be between" "$cli" bench "$unused" --time 31536001
expect_exit 7 "login-timeout '1e300': not a number of seconds" "$cli" ls "$unused" --login-timeout 1e300
for sub in ls bench mount; do
  args=("$unused")
  [ $sub != mount ] || args+=("$mnt")
  expect_exit 7 "replacement-timeout '-1': not a number of seconds" \
    "$cli" $sub "${args[@]}" --replacement-timeout -1
  expect_exit 7 "command-timeout '1e300': not a number of seconds" \
    "$cli" $sub "${args[@]}" --command-timeout 1e300
  expect_exit 7 "replacement-timeout '31536000.5': must be between 0 and 31536000 seconds" \
    "$cli" $sub "${args[@]}" --replacement-timeout 31536000.5
  expect_exit 7 "command_timeout 'x': not a number of seconds" \
    "$cli" $sub "$unused?command_timeout=x" "${args[@]:1}"
  expect_exit 7 "argument 'replacement_timeout' given twice" \
    "$cli" $sub "$unused?replacement_timeout=1&replacement_timeout=2" "${args[@]:1}"
  expect_exit 7 "portal 'h:0'" "$cli" $sub "$unused?portal=h:0" "${args[@]:1}"
  help=$("$cli" $sub --help)
  check "$sub --help documents --replacement-timeout" grep -q -- "--replacement-timeout.*default" <<<"$help"
  check "$sub --help documents --command-timeout" grep -q -- "--command-timeout.*default" <<<"$help"
done
expect_exit 5 "refused" "$cli" ls "$unused?replacement_timeout=0.5&portal=127.0.0.1:$(tgt_free_port)" \
  --replacement-timeout 0 --command-timeout 2.5
expect_exit 5 "refused" "$cli" bench "$unused" --time 0.5 --replacement-timeout 3 --command-timeout 0
expect_exit 7 "not expected.*--replacement-timeout" "$cli" session --replacement-timeout 3

LIBISCSI_CHAP_PASSWORD=alice-secret-1 check "CHAP login with the default algorithm and the password from the environment" \
  timeout 30 "$cli" ls "iscsi://alice@$portal/$iqn-chap/1"
LIBISCSI_CHAP_PASSWORD=alice-secret-1 check "CHAP login with auth=md5" \
  timeout 30 "$cli" ls "iscsi://alice@$portal/$iqn-chap/1?auth=md5"
# tgt picks SHA-256 from this offer and cannot verify it: the advice is MD5, never SHA-256 again.
export LIBISCSI_CHAP_PASSWORD=alice-secret-1
expect_exit 24 "could not verify SHA256: try auth=md5 in the URL" \
  "$cli" ls "iscsi://alice@$portal/$iqn-chap/1?auth=sha-256,md5"
export LIBISCSI_CHAP_PASSWORD=wrong-secret-1
expect_exit 24 "Authentication failure.*check the CHAP user name and secret" \
  "$cli" ls "iscsi://alice@$portal/$iqn-chap/1"
out=$(timeout 60 "$cli" ls "iscsi://alice@$portal/$iqn-chap/1" 2>&1) || true
check "a wrong secret with the default MD5 suggests no other algorithm" test "${out/auth=/}" = "$out"
unset LIBISCSI_CHAP_PASSWORD
expect_exit 7 "auth: CHAP algorithm 'md5' is listed twice" \
  "$cli" ls "iscsi://alice@$portal/$iqn-chap/1?auth=md5,md5"
expect_exit 24 "requires authentication" "$cli" ls "iscsi://$portal/$iqn-chap/1"
expect_exit 7 "unknown|argument" "$cli" ls "iscsi://$portal/$iqn/1?bogus=1"
expect_exit 7 "port" "$cli" ls "iscsi://127.0.0.1:99999/$iqn/1"
expect_exit 19 "refused: target answered Not found" "$cli" ls "iscsi://$portal/iqn.2026-11.nonexistent:x/1"
# With CHAP offered it is the same: the target's refusal, not a failure of the security
# negotiation.
LIBISCSI_CHAP_PASSWORD=alice-secret-1 expect_exit 19 \
  "target iqn.2026-11.nonexistent:x refused: target answered Not found" \
  "$cli" ls "iscsi://alice@$portal/iqn.2026-11.nonexistent:x/1"
closed=$(tgt_free_port)
expect_exit 5 "refused" "$cli" discover -p "127.0.0.1:$closed"
expect_exit 7 "" "$cli" bench "iscsi://$portal/$iqn/1" --rw sideways

checks_done
