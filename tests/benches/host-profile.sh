#!/usr/bin/env bash
# Where an initiator's cores go: flat profiles (perf record, system-wide on the initiator's
# cores, so the kernel's share shows) of `fabrik bench` and of spdk_nvme_perf, 4K random reads
# against SPDK's nvmf_tgt (4 null namespaces), as host-ab.sh runs them. Never in CI: it needs
# ../shared/spdk, perf and root.
#
#   tests/benches/host-profile.sh [FABRIK] [OUT_DIR]   (build/release/fabrik, /tmp/host-profile)
#
# OUT_DIR gets fabrik.txt (one core, 32 per namespace), fabrik4.txt (HOST_CORES, drives of their
# own), perf.txt (one core) and perf4.txt (HOST_CORES): first perf stat's counts on those cores
# (CPU time, context switches, system calls), then the share of each binary and kernel, then of
# each symbol.
# TARGET_MASK=0xF (nvmf_tgt), HOST_CORE=8, HOST_CORES=8-11 (comma-free range), SECS=4 recorded.
# PERF="perf": the perf command. The H200/H100 machines have none: carry Debian's perf with its
# libraries and run it through their loader, e.g. PERF="DIR/ld-linux-x86-64.so.2 --library-path
# DIR DIR/perf". A stripped fabrik has no symbols: `strip --strip-debug` keeps them (13 MB).
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
FAB=${1:-$REPO/build/release/fabrik}
OUT=${2:-/tmp/host-profile}
SPDK=${SPDK:-$REPO/../shared/spdk}
TARGET_MASK=${TARGET_MASK:-0xF} HOST_CORE=${HOST_CORE:-8} HOST_CORES=${HOST_CORES:-8-11}
SECS=${SECS:-4} PERF=${PERF:-perf}
[ -x "$SPDK/bin/nvmf_tgt" ] || { echo "no SPDK in $SPDK (set SPDK=...)"; exit 1; }
[ -x "$FAB" ] || { echo "no fabrik at $FAB: cargo build --release first"; exit 1; }
mkdir -p "$OUT"
# shellcheck source=/dev/null
. "$SPDK/env.sh"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export SPDK_LOG=$work/nvmf_tgt.log
pid=$("$SPDK/tgt.sh" "$TARGET_MASK" 4 "$port" box null)
trap 'kill -INT "$pid" 2>/dev/null; rm -rf "$work"' EXIT
nqns=()
for i in 0 1 2 3; do nqns+=(-n "nqn.2024-01.io.fabrik:box:drive-0$i"); done
first=${HOST_CORES%-*} last=${HOST_CORES#*-}
cpus=$(seq -s, "$first" "$last")
threads=$((last - first + 1))

profile() { # NAME CORES COMMAND...: perf record on CORES while COMMAND runs
  local name=$1 cores=$2
  shift 2
  "$@" >"$work/$name.out" 2>&1 &
  local load=$!
  sleep 3
  $PERF stat -e task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter -C "$cores" \
    -o "$work/$name.stat" -- sleep "$SECS" >/dev/null 2>&1 || true
  $PERF record -F 2000 -C "$cores" -o "$work/$name.data" -- sleep "$SECS" >/dev/null 2>&1
  wait "$load" || true
  {
    grep -m1 -E '"iops"|^Total' "$work/$name.out" || true
    grep -E 'task-clock|context-switches|migrations|sys_enter|elapsed' "$work/$name.stat" || true
    $PERF report -i "$work/$name.data" --no-children --sort dso --stdio 2>/dev/null |
      grep -v '^#' | grep -v '^$' | head -15
    $PERF report -i "$work/$name.data" --no-children --sort dso,sym --percent-limit 0.25 \
      --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -150
  } >"$OUT/$name.txt"
  echo "$name: $(head -1 "$OUT/$name.txt")"
}

run=$((2 * SECS + 6))
profile fabrik "$HOST_CORE" taskset -c "$HOST_CORE" "$FAB" bench -a 127.0.0.1 -s "$port" "${nqns[@]}" \
  --cpus "$HOST_CORE" --rw randread --bs 4k --iodepth 128 --threads 1 --worker-drives own \
  --time "$run" --quiet --json
profile fabrik4 "$HOST_CORES" taskset -c "$HOST_CORES" "$FAB" bench -a 127.0.0.1 -s "$port" \
  "${nqns[@]}" --cpus "$cpus" --rw randread --bs 4k --iodepth 32 --threads "$threads" \
  --worker-drives own --time "$run" --quiet --json
profile perf "$HOST_CORE" "$SPDK/perf.sh" 4 "$port" box -c "$(printf '0x%x' $((1 << HOST_CORE)))" \
  -q 32 -o 4096 -w randread -t "$run"
mask=0
for c in $(seq "$first" "$last"); do mask=$((mask | 1 << c)); done
profile perf4 "$HOST_CORES" "$SPDK/perf.sh" 4 "$port" box -c "$(printf '0x%x' $mask)" \
  -q 32 -o 4096 -w randread -t "$run"
echo "profiles in $OUT"
