#!/usr/bin/env bash
# scripts/check-layers must catch an include that points up a layer, and one from softrdma into
# the initiator, and pass a tree whose includes all point down.
set -euo pipefail
check=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/initiator/{base,session,transport/tcp} "$tree"/softrdma/src
echo '#include "initiator/base/status.h"' >"$tree"/initiator/transport/tcp/tcp_datamover.cc
echo '#include "initiator/transport/tcp/tcp_datamover.h"' >"$tree"/initiator/session/datamover_factory.cc
"$check" "$tree" || { echo "FAIL: a tree that keeps the layering was rejected"; exit 1; }

echo '#include "initiator/session/session.h"' >>"$tree"/initiator/transport/tcp/tcp_datamover.cc
echo '#include "initiator/transport/tcp/tcp_datamover.h"' >"$tree"/initiator/session/session.cc
echo '#include "initiator/base/log.h"' >"$tree"/softrdma/src/cm.cc
if out=$("$check" "$tree" 2>&1); then
  echo "FAIL: upward includes were accepted"; exit 1
fi
for want in "initiator/transport/tcp/tcp_datamover.cc:2: includes initiator/session/session.h" \
            "initiator/session/session.cc:1: includes initiator/transport/tcp/tcp_datamover.h" \
            "softrdma/src/cm.cc:1: includes initiator/base/log.h"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: no complaint '$want' in:"; echo "$out"; exit 1; }
done
echo "check-layers: 3 of 3 bad includes caught"
