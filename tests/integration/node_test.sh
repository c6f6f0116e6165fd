#!/usr/bin/env bash
# End-to-end test of the node records (docs/nodes.md) against a real tgtd with two targets:
# discover -o new|old|delete, node list/show/update/delete, the store's modes, its errors and exit
# codes, concurrent discovers into one store, and secrets that never show (output, logs, argv).
# Usage: node_test.sh PATH/TO/iser-connect
set -euo pipefail
cli=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness/functions.sh"
. "$here/../harness/tgt.sh"

tgt_start
iqn=iqn.2026-11.io.iser-connect.test:node
tgt_target 1 $iqn-a
tgt_target 2 $iqn-b
tgt_lun 1 1 8M
tgt_lun 2 1 8M
portal=127.0.0.1:$TGT_PORT
temp_dir work node
cfg=$work/cfg
secret=Zq9-node-secret-7781
secret_in=Wx4-mutual-secret-3349

# The store's files, names and contents, to compare two states of it.
snapshot() {
  (cd "$1" && find . -type f ! -name lock -print0 | sort -z | xargs -0 -r tail -n +1)
}

out=$(timeout 30 "$cli" discover -p "$portal" --config-dir "$cfg")
check "discover without -o prints both targets" test "$(wc -l <<<"$out")" -eq 2
check "discover without -o writes nothing" test ! -e "$cfg"

out=$(timeout 30 "$cli" discover -p "$portal" -o new --config-dir "$cfg" 2>"$work/err")
check "discover -o new still prints the discovery lines on stdout" \
  grep -qx "$portal,1 $iqn-a" <<<"$out"
check "discover -o new says on stderr what it added" \
  test "$(grep -c "new record $portal,1 $iqn-" "$work/err")" -eq 2
first=$(snapshot "$cfg")
timeout 30 "$cli" discover -p "$portal" -o new --config-dir "$cfg" 2>"$work/err"
check "discover -o new twice gives the same records" test "$(snapshot "$cfg")" = "$first"
check "the second discover -o new adds nothing" test ! -s "$work/err"
list=$(timeout 30 "$cli" node --config-dir "$cfg")
echo "$list"
check "node lists both records as iscsiadm -m node" \
  test "$list" = "$(printf '%s\n' "$portal,1 $iqn-a" "$portal,1 $iqn-b")"
check "node --json lists both" python3 -c '
import json,sys; d=json.loads(sys.argv[1])
assert [r["target"] for r in d]==[sys.argv[2]+"-a", sys.argv[2]+"-b"], d
assert d[0]["portal"]=={"address":"127.0.0.1","port":'"$TGT_PORT"',"tpgt":1}, d
assert d[0]["transport"]=="tcp", d' \
  "$(timeout 30 "$cli" node --json --config-dir "$cfg")" "$iqn"
rec=$cfg/nodes/$iqn-a/127.0.0.1,$TGT_PORT,1
check "records live in nodes/IQN/HOST,PORT,TPGT" test -f "$rec"
check "config directory is mode 0700" test "$(stat -c %a "$cfg")" = 700
check "nodes and target directories are mode 0700" \
  test "$(stat -c %a "$cfg/nodes" "$cfg/nodes/$iqn-a" | sort -u)" = 700
check "record files are mode 0600" \
  test "$(find "$cfg/nodes" -type f -printf '%m\n' | sort -u)" = 600
show=$(timeout 30 "$cli" node -T $iqn-a --config-dir "$cfg")
check "show has iscsiadm's defaults" grep -qx "node.session.timeo.replacement_timeout = 120" <<<"$show"
check "show has the login timeout default" grep -qx "node.conn\[0\].timeo.login_timeout = 15" <<<"$show"
check "show has the command timeout default" grep -qx "node.session.timeo.command_timeout = 30" <<<"$show"
check "show marks an unset secret <empty>" grep -qx "node.session.auth.password = <empty>" <<<"$show"
check "show has the discovery source" grep -qx "node.discovery_port = $TGT_PORT" <<<"$show"

# Every updatable key round-trips through --op update and --op show.
declare -A values=(
  [node.startup]=automatic
  [iface.transport_name]=iser
  [node.session.auth.authmethod]=CHAP
  [node.session.auth.username]=alice
  [node.session.auth.username_in]=bob
  [node.conn\[0\].iscsi.HeaderDigest]=CRC32C,None
  [node.conn\[0\].iscsi.DataDigest]=None,CRC32C
  [node.conn\[0\].timeo.login_timeout]=2.5
  [node.session.timeo.replacement_timeout]=0
  [node.session.timeo.command_timeout]=45.125
  [node.discovery_address]=portal.example
  [node.discovery_port]=3999
  [node.discovery_transport]=iser
)
for key in "${!values[@]}"; do
  check "update $key" timeout 30 "$cli" node -T $iqn-a -p "$portal" --op update -n "$key" \
    -v "${values[$key]}" --config-dir "$cfg"
done
printf '%s\n' "$secret" >"$work/secret"
check "a secret is set from --value-file" timeout 30 "$cli" node -T $iqn-a --op update \
  -n node.session.auth.password --value-file "$work/secret" --config-dir "$cfg"
printf '%s\n' "$secret_in" >"$work/secret_in"
check "a secret is set from stdin with -v -" timeout 30 "$cli" node -T $iqn-a --op update \
  -n node.session.auth.password_in -v - --config-dir "$cfg" <"$work/secret_in"
show=$(timeout 30 "$cli" node -T $iqn-a -p "$portal" --op show --config-dir "$cfg")
echo "$show"
for key in "${!values[@]}"; do
  check "show reads back $key" grep -qxF "$key = ${values[$key]}" <<<"$show"
done
check "show masks the secret" grep -qx "node.session.auth.password = \*\*\*\*\*\*\*\*" <<<"$show"
check "show masks the mutual secret" grep -qx "node.session.auth.password_in = \*\*\*\*\*\*\*\*" <<<"$show"
check "show lists every key once" test "$(grep -c ' = ' <<<"$show")" -eq 19
check "the record holds the secret" grep -qxF "node.session.auth.password = $secret" "$rec"
check "the record holds the mutual secret" grep -qxF "node.session.auth.password_in = $secret_in" "$rec"
check "the record is still mode 0600" test "$(stat -c %a "$rec")" = 600

# Bad keys and values: exit 7 naming them, the file byte-identical.
before=$(sha256sum "$rec")
expect_exit 7 "node.conn\[0\].timeo.login_timeout '0'" \
  "$cli" node -T $iqn-a --op update -n "node.conn[0].timeo.login_timeout" -v 0 --config-dir "$cfg"
expect_exit 7 "iface.transport_name 'rdma': must be tcp or iser" \
  "$cli" node -T $iqn-a --op update -n iface.transport_name -v rdma --config-dir "$cfg"
expect_exit 7 "unknown key 'node.colour'" \
  "$cli" node -T $iqn-a --op update -n node.colour -v red --config-dir "$cfg"
expect_exit 7 "node.name names the record and cannot be updated" \
  "$cli" node -T $iqn-a --op update -n node.name -v iqn.x:y --config-dir "$cfg"
expect_exit 7 "secret.*--value-file FILE" \
  "$cli" node -T $iqn-a --op update -n node.session.auth.password -v hunter2-argv --config-dir "$cfg"
expect_exit 7 "needs -T IQN and/or -p PORTAL" "$cli" node --op delete --config-dir "$cfg"
expect_exit 7 "op: .*update" "$cli" node -T $iqn-a --op frobnicate --config-dir "$cfg"
check "a refused update leaves the record byte-identical" test "$(sha256sum "$rec")" = "$before"

# Unknown records: 21 naming them.
expect_exit 21 "no record for target iqn.2026-11.nonexistent:x" \
  "$cli" node -T iqn.2026-11.nonexistent:x --op show --config-dir "$cfg"
expect_exit 21 "no record for target $iqn-a at 127.0.0.1:1" \
  "$cli" node -T $iqn-a -p 127.0.0.1:1 --op update -n node.startup -v manual --config-dir "$cfg"
expect_exit 21 "no records found in $work/empty" "$cli" node --config-dir "$work/empty"

# A config directory that cannot be created or used: 6 (iscsiadm's database error) naming it.
# Under a regular file, so that it fails for root too.
touch "$work/file"
expect_exit 6 "$work/file" "$cli" discover -p "$portal" -o new --config-dir "$work/file/cfg"
expect_exit 6 "$work/file/cfg" "$cli" node --config-dir "$work/file/cfg"
expect_exit 6 "$work/file" "$cli" node -T $iqn-a --op delete --config-dir "$work/file/cfg"
# A malformed record: 6 naming its file and line.
cp -a "$cfg" "$work/broken"
sed -i 's/^node.tpgt = 1$/node.tpgt = one/' "$work/broken/nodes/$iqn-b/127.0.0.1,$TGT_PORT,1"
expect_exit 6 "$work/broken/nodes/$iqn-b/127.0.0.1,$TGT_PORT,1:3: node.tpgt 'one'" \
  "$cli" node --config-dir "$work/broken"
# Others could read a record: repaired to 0600 with a warning.
chmod 0644 "$work/broken/nodes/$iqn-a/127.0.0.1,$TGT_PORT,1"
out=$(timeout 30 "$cli" node -T $iqn-a --config-dir "$work/broken" 2>&1)
check "a record others can read is made 0600" \
  test "$(stat -c %a "$work/broken/nodes/$iqn-a/127.0.0.1,$TGT_PORT,1")" = 600
check "and the user is told" grep -q "was mode 0644, open to other users" <<<"$out"

# Secrets: never in output, logs or argv.
out=$(timeout 30 "$cli" node -T $iqn-a --op show --log-level debug --config-dir "$cfg" 2>&1)
out+=$(timeout 30 "$cli" node -T $iqn-a --op show --json --config-dir "$cfg" 2>&1)
out+=$(timeout 30 "$cli" -v discover -p "$portal" -o new -o old --config-dir "$cfg" 2>&1)
out+=$(timeout 30 "$cli" node --help 2>&1)
check "no secret in show, --json, debug logs or --help" \
  test "$(grep -cF -e "$secret" -e "$secret_in" <<<"$out")" -eq 0
: >"$work/argv"
for _ in 1 2 3 4 5; do
  timeout 30 "$cli" discover -p "$portal" -o new -o old --config-dir "$cfg" >/dev/null 2>&1 &
  pids=($!)
  timeout 30 "$cli" node -T $iqn-a --op update -n node.session.auth.password -v - \
    --config-dir "$cfg" <"$work/secret" &
  pids+=($!)
  for _ in $(seq 20); do
    cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' >>"$work/argv" || true
  done
  wait "${pids[@]}"  # not tgtd, also a child of this shell
done
check "the scan of argv saw the commands run" grep -q "discover -p $portal -o new" "$work/argv"
check "no secret in the argv of any process" test "$(grep -cF "$secret" "$work/argv")" -eq 0
check "-o old keeps settings the user changed" \
  grep -qxF "node.session.auth.username = alice" "$rec"
check "-o old puts back the discovery source" grep -qxF "node.discovery_port = $TGT_PORT" "$rec"

# Two targets' records, then target b leaves tgtd: -o old alone keeps its record, -o delete
# removes it (and only it).
TGT_IPC_SOCKET=$TGT_IPC_SOCKET tgtadm --lld iscsi --mode target --op delete --force --tid 2
out=$(timeout 30 "$cli" discover -p "$portal" -o old --config-dir "$cfg")
check "tgtd no longer reports target b" test "$out" = "$portal,1 $iqn-a"
check "-o old alone keeps the record of a target that left" \
  test "$(timeout 30 "$cli" node --config-dir "$cfg" | wc -l)" -eq 2
timeout 30 "$cli" discover -p "$portal" -o delete --config-dir "$cfg" 2>"$work/err"
check "-o delete says what it removed" grep -q "removed record $portal,1 $iqn-b" "$work/err"
check "-o delete removes it" \
  test "$(timeout 30 "$cli" node --config-dir "$cfg")" = "$portal,1 $iqn-a"
check "and its directory" test ! -e "$cfg/nodes/$iqn-b"
check "node --op delete removes a record" \
  timeout 30 "$cli" node -T $iqn-a -p "$portal" --op delete --config-dir "$cfg"
expect_exit 21 "no records found" "$cli" node --config-dir "$cfg"

# Concurrent discovers into one store, several rounds: every record valid, none lost, no
# temporary file left behind.
tgt_target 2 $iqn-b
tgt_lun 2 1 8M
for round in 1 2 3; do
  pids=()
  for _ in 1 2 3 4 5 6; do
    timeout 60 "$cli" discover -p "$portal" -o new -o old --config-dir "$work/race" \
      >/dev/null 2>>"$work/race.err" &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
  check "round $round: every concurrent discover succeeded" test "$failed" -eq 0
  check "round $round: both records, each valid" \
    test "$(timeout 30 "$cli" node --config-dir "$work/race" | wc -l)" -eq 2
  check "round $round: every record parses" \
    timeout 30 "$cli" node -p "$portal" --op show --config-dir "$work/race"
  check "round $round: no temporary files" \
    test -z "$(find "$work/race/nodes" -name '.*' -type f)"
done
check "the concurrent discovers added each record once" \
  test "$(grep -c "new record" "$work/race.err")" -eq 2

checks_done
