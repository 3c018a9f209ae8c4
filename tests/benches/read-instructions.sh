#!/usr/bin/env bash
# User-space instructions fabrikd spends per 4K read, counted by callgrind: a figure that does not
# drift as timings do, for comparing builds on one machine. fabrikd runs under valgrind on one
# core (null drive, polling off, so each read is one epoll_wait, one recv and one writev at QD1);
# spdk_nvme_perf reads from it on another core; instrumentation is on for SECS seconds after a
# warm-up. Needs valgrind and ../shared/spdk. Never in CI.
#
#   tests/benches/read-instructions.sh [LABEL=]FABRIKD... (default: build/release/fabrikd)
#
# QD=1 (perf's queue depth), RW=randread, SECS=6, TARGET_CORE=0, PERF_CORE=1, FABRIKD_ARGS="..."
# (e.g. --c2h-success). Prints, per build: reads counted, instructions, instructions per read.
#
# Figures from it (development VM, QD1, Dec 2026) are in the README, section on SPDK: 6,594 per
# read for the build of Dec 1, 5,200 after the signals and send-queue changes of Dec 3.
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SPDK=${SPDK:-$REPO/../shared/spdk}
QD=${QD:-1} RW=${RW:-randread} SECS=${SECS:-6}
TARGET_CORE=${TARGET_CORE:-0} PERF_CORE=${PERF_CORE:-1}
[ $# -gt 0 ] || set -- "$REPO/build/release/fabrikd"
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)"; exit 1; }
[ -x "$SPDK/perf.sh" ] || { echo "needs SPDK's perf at $SPDK (../shared/spdk)"; exit 1; }
# shellcheck source=/dev/null
. "$SPDK/env.sh"
work=$(mktemp -d)
vg=
trap '[ -n "$vg" ] && kill "$vg" 2>/dev/null; rm -rf "$work"' EXIT

for t in "$@"; do
  label=${t%%=*} bin=${t#*=}
  [ "$label" != "$t" ] || label=$(basename "$bin")
  dir=$work/$label
  mkdir -p "$dir/data"
  port=$((20000 + RANDOM % 20000))
  # shellcheck disable=SC2086
  taskset -c "$TARGET_CORE" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$dir/callgrind.out" "$bin" --cores "$TARGET_CORE" \
    --data-dir "$dir/data" --listen "127.0.0.1:$port" --backend null --drives 1 \
    --drive-size 1G --box-name box --api off --api-socket off --metrics off \
    --poll-idle-us 0 ${FABRIKD_ARGS:-} >"$dir/log" 2>&1 &
  vg=$!
  for _ in $(seq 300); do grep -q listener "$dir/log" && break; sleep 0.2; done
  grep -q listener "$dir/log" || { echo "$label did not start:"; tail -5 "$dir/log"; exit 1; }
  "$SPDK/perf.sh" 1 "$port" box -c "$(printf '0x%x' $((1 << PERF_CORE)))" -q "$QD" -o 4096 \
    -w "$RW" -t $((SECS + 8)) >"$dir/perf.log" 2>&1 &
  perf=$!
  sleep 4
  callgrind_control -i on "$vg" >/dev/null 2>&1
  sleep "$SECS"
  callgrind_control -i off "$vg" >/dev/null 2>&1
  wait "$perf" || true
  kill -TERM "$vg"; wait "$vg" || true; vg=
  # Reads are counted by the calls of the read statistics' update, once per read served.
  python3 - "$dir/callgrind.out" "$label" <<'PY'
import re, sys
names, calls, total, callee = {}, 0, 0, None
for line in open(sys.argv[1]):
    m = re.match(r'(c?)fn=\((\d+)\)(?: (.*))?', line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        callee = names.get(m.group(2), '') if m.group(1) else None
        continue
    if line.startswith('calls=') and callee is not None:
        if 'NamespaceStats::read' in callee:
            calls += int(line.split('=')[1].split()[0])
        callee = None
    elif line.startswith(('summary:', 'totals:')):
        total = int(line.split()[1])
if not calls:
    sys.exit(f"{sys.argv[2]}: no reads counted (perf failed?)")
print(f"{sys.argv[2]}: {calls} reads, {total} instructions, {total / calls:.0f} per read")
PY
done
