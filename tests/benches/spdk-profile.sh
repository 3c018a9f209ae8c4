#!/usr/bin/env bash
# Where fabrikd's cores go under spdk_nvme_perf's load: a flat profile (perf record) of one
# fabrikd, the same set-up as spdk-ab.sh (which see): N namespaces, the target on CORES, the
# initiator on PERF_CORES. Never in CI.
#
#   tests/benches/spdk-profile.sh [FABRIKD]          (default build/release/fabrikd)
#
# CORES=0-3 BACKEND=null|ram|file WORKLOAD="-q 32 -o 4096 -w randread" TOP=40: profile lines.
# PERF="perf": the perf command (a machine without it: a copied perf run through its own
#   loader, e.g. PERF="/tmp/perfkit/ld-linux-x86-64.so.2 --library-path /tmp/perfkit /tmp/perfkit/perf").
# Drives that hold data are written first, as in spdk-ab.sh (see spdk-lib.sh's precondition).
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BIN=${1:-$REPO/build/release/fabrikd}
SPDK=${SPDK:-$REPO/../shared/spdk}
CORES=${CORES:-0-3}
PERF_CORES=${PERF_CORES:-0xFF00}
BACKEND=${BACKEND:-null}
WORKLOAD=${WORKLOAD:-"-q 32 -o 4096 -w randread"}
TOP=${TOP:-40}
PERF=${PERF:-perf}
N=${N:-4}
[ -x "$SPDK/bin/nvmf_tgt" ] || { echo "no SPDK in $SPDK (set SPDK=...)"; exit 1; }
# shellcheck source=/dev/null
. "$SPDK/env.sh"
# shellcheck source=tests/benches/spdk-lib.sh
. "$REPO/tests/benches/spdk-lib.sh"
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
start_fabrikd "$BIN" "$CORES" "$port"
precondition "$port"
# shellcheck disable=SC2086
"$SPDK/perf.sh" "$N" "$port" box -c "$PERF_CORES" $WORKLOAD -t 10 >"$work/perf.out" 2>&1 &
load=$!
sleep 3
# shellcheck disable=SC2086
$PERF record -F 2000 -o "$work/perf.data" -p "$pid" -- sleep 4 >/dev/null 2>&1
wait "$load" || true
echo "fabrikd on cores $CORES, $BACKEND, $WORKLOAD: $(grep -E '^Total' "$work/perf.out" | tail -1 | tr -s ' ')"
# shellcheck disable=SC2086
$PERF report -i "$work/perf.data" --no-children --sort sym --stdio 2>/dev/null |
  grep -v '^#' | grep -v '^$' | head -"$TOP"
