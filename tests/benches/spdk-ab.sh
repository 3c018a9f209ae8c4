#!/usr/bin/env bash
# fabrikd against SPDK's nvmf_tgt, side by side: the same initiator (SPDK's spdk_nvme_perf on
# cores of their own), the targets pinned to the same cores, alternated figure by figure; the
# medians of the rounds, the ratios to SPDK, and each target's CPU use. Never in CI: it needs the
# prebuilt SPDK of ../shared/spdk and a machine with cores to spare (the H200 machine: 16).
#
#   tests/benches/spdk-ab.sh [ROUNDS [SECS]]        (default 3 rounds of 5 s per figure)
#
# SPDK=dir of the prebuilt SPDK (default ../shared/spdk beside the repo).
# TARGETS="spdk fabrikd=PATH [base=PATH ...]": what to alternate; "spdk" is nvmf_tgt, any
#   other LABEL=PATH a fabrikd binary (default: spdk and build/release/fabrikd).
# CORE_SETS="0 0-3": target cores per table (taskset lists).   PERF_CORES=0xFF00: initiator.
# BACKEND=null (fabrikd null, SPDK null bdevs) or ram (fabrikd ram, SPDK malloc: needs 4 GiB
#   of hugepages for SPDK, set up here when run as root; every drive is written whole first,
#   FILL_SECS=3 of 128K writes) or file (fabrikd's file backend, files
#   in TMPDIR: on tmpfs, the drive I/O path without a device's time; fabrikd binaries only).
# N=4 namespaces, one subsystem each. FABRIKD_ARGS: more arguments for every fabrikd, e.g.
#   "--c2h-success" to answer reads as SPDK's target does by default (see the README).
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-5}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SPDK=${SPDK:-$REPO/../shared/spdk}
TARGETS=${TARGETS:-"spdk fabrikd=$REPO/build/release/fabrikd"}
CORE_SETS=${CORE_SETS:-"0 0-3"}
PERF_CORES=${PERF_CORES:-0xFF00}
BACKEND=${BACKEND:-null}
N=${N:-4}
[ -x "$SPDK/bin/nvmf_tgt" ] || { echo "no SPDK in $SPDK (set SPDK=...)"; exit 1; }
case " $TARGETS " in *" spdk "*) [ "$BACKEND" != file ] || { echo "BACKEND=file: fabrikd binaries only"; exit 1; } ;; esac
# shellcheck source=/dev/null
. "$SPDK/env.sh"
# shellcheck source=tests/benches/spdk-lib.sh
. "$REPO/tests/benches/spdk-lib.sh"
hugepages_for_malloc
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
pid=
declare -A pids=() ports=()
stop_all() { for l in "${!pids[@]}"; do stop_target "${pids[$l]}"; done; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

figures=(
  "4k-randread-qd32|$N|-q 32 -o 4096 -w randread"
  "4k-randwrite-qd32|$N|-q 32 -o 4096 -w randwrite"
  "128k-read-qd8|$N|-q 8 -o 131072 -w read"
  "128k-write-qd8|$N|-q 8 -o 131072 -w write"
  "4k-randread-qd1|1|-q 1 -o 4096 -w randread"
)
hz=$(getconf CLK_TCK)
: >"$work/results.tsv"
# SPDK polls its cores at 100 % even without a host: stopped (SIGSTOP) whenever another target is
# measured; fabrikd sleeps when it has nothing to do.
pause() { [ "$1" != spdk ] || kill -STOP "${pids[$1]}"; }
resume() { [ "$1" != spdk ] || kill -CONT "${pids[$1]}"; }
measure_idle() { # CORES LABEL: CPU with no host, then with 24 hosts sending only keep-alives
  local cores=$1 label=$2 p=${pids[$2]} t0 idle idler
  sleep 1
  t0=$(cpu_ticks "$p"); sleep 3; idle=$(( $(cpu_ticks "$p") - t0 ))
  printf '%s\t%s\t%s\t%s\t%s\n' "$cores" idle-no-hosts "$label" \
    "$(awk -v t="$idle" -v hz="$hz" 'BEGIN{print t/hz/3*100}')" 0 >>"$work/results.tsv"
  python3 "$REPO/tests/benches/idle-hosts.py" 127.0.0.1 "${ports[$label]}" nqn.2024-01.io.fabrik:box:drive-00 24 9 \
    >"$work/idle-hosts.log" 2>&1 &
  idler=$!
  for _ in $(seq 50); do grep -q connected "$work/idle-hosts.log" && break; sleep 0.1; done
  sleep 1
  t0=$(cpu_ticks "$p"); sleep 5; idle=$(( $(cpu_ticks "$p") - t0 ))
  wait "$idler" || { echo "idle hosts failed:"; cat "$work/idle-hosts.log"; }
  printf '%s\t%s\t%s\t%s\t%s\n' "$cores" idle-24-hosts "$label" \
    "$(awk -v t="$idle" -v hz="$hz" 'BEGIN{print t/hz/5*100}')" 0 >>"$work/results.tsv"
}
# SPDK's malloc bdevs hold all their memory from the start; fabrikd's ram drives map it on first
# write (2 MiB chunks, zeroed by the kernel), which cost its first 4K random write figure on one
# core about a tenth (H200 machine, 309K then 414-478K IOPS in back-to-back 3 s runs). So each
# drive of both targets is written whole once, before any figure, and both meet written memory.
fill() {
  [ "$BACKEND" = ram ] || return 0
  "$SPDK/perf.sh" "$N" "${ports[$1]}" box -c "$PERF_CORES" -q 8 -o 131072 -w write \
    -t "${FILL_SECS:-3}" >/dev/null 2>&1 || echo "fill of $1 failed" >&2
}
# Each round starts every target once, all on the same cores, and then alternates them figure by
# figure: the targets compared in one figure ran seconds apart (the machines drift by tens of
# percent within minutes), and each figure's order is the previous one's reversed.
flip=0
for cores in $CORE_SETS; do
  for round in $(seq "$ROUNDS"); do
    for t in $TARGETS; do
      label=${t%%=*}
      start_target "$t" "$cores"
      pids[$label]=$pid ports[$label]=$port
      [ "$round" != 1 ] || measure_idle "$cores" "$label"
      fill "$label"
      pause "$label"
    done
    for f in "${figures[@]}"; do
      IFS='|' read -r name n args <<<"$f"
      order=($TARGETS)
      flip=$((1 - flip))
      if [ $flip = 0 ]; then order=($(printf '%s\n' "${order[@]}" | tac)); fi
      for t in "${order[@]}"; do
        label=${t%%=*}
        p=${pids[$label]}
        resume "$label"
        t0=$(cpu_ticks "$p")
        # shellcheck disable=SC2086
        out=$("$SPDK/perf.sh" "$n" "${ports[$label]}" box -c "$PERF_CORES" $args -t "$SECS" 2>&1) || true
        ticks=$(( $(cpu_ticks "$p") - t0 ))
        # Let it see the host's queues go before it stops.
        sleep 0.5
        pause "$label"
        # IOPS, MiB/s, average us; CPU in cores (% of one).
        read -r iops mibs avg <<<"$(perf_figures "$out" "$label $name")"
        cpu=$(awk -v t="$ticks" -v hz="$hz" -v s="$SECS" 'BEGIN{printf "%.0f", t/hz/s*100}')
        case $name in
          *qd1) v=$avg ;;
          128k*) v=$(awk -v m="$mibs" 'BEGIN{printf "%.2f", m*1048576/1e9}') ;;
          *) v=$iops ;;
        esac
        printf '%s\t%s\t%s\t%s\t%s\n' "$cores" "$name" "$label" "$v" "$cpu" >>"$work/results.tsv"
        echo "cores $cores round $round $label $name: $v (target CPU ${cpu}%)" >&2
      done
    done
    stop_all
  done
done

echo
echo "Medians of $ROUNDS rounds, targets alternated figure by figure, $SECS s each; backend $BACKEND;"
echo "$N namespaces; idle figures from the first round;"
echo "4k QD32/128k: IOPS / GB/s (higher is better); qd1: average latency in us (lower is better);"
echo "idle: target CPU (% of one core) with no host, and with 24 hosts sending only keep-alives;"
echo "cpu: the target's CPU during the figure (% of one core). Ratios: of the medians, and in"
echo "brackets the lowest and highest ratio within one round."
python3 - "$work/results.tsv" $TARGETS <<'EOF'
import sys, statistics, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
labels = [t.split("=")[0] for t in sys.argv[2:]]
vals = collections.defaultdict(list); cpus = collections.defaultdict(list)
order = []
for cores, name, label, v, cpu in rows:
    if (cores, name) not in order: order.append((cores, name))
    vals[cores, name, label].append(float(v)); cpus[cores, name, label].append(float(cpu))
ref = labels[0]
head = ["cores", "figure"] + [f"{l}" for l in labels] + [f"{l}/{ref}" for l in labels[1:]] + [f"cpu {l}" for l in labels]
print("| " + " | ".join(head) + " |"); print("|" + "---|" * len(head))
for cores, name in order:
    med = {l: statistics.median(vals[cores, name, l]) if vals[cores, name, l] else float("nan") for l in labels}
    cpu = {l: statistics.median(cpus[cores, name, l]) if cpus[cores, name, l] else float("nan") for l in labels}
    fmt = (lambda x: f"{x:.1f}") if name.endswith("qd1") or name.startswith("idle") else (lambda x: f"{x:.2f}" if x < 1000 else f"{x/1000:.0f}K")
    ratio = []
    for l in labels[1:]:
        r = med[l] / med[ref] if med[ref] else float("nan")
        # The spread of the ratio within each round (the targets of one figure and round ran
        # seconds apart; the machine drifts more between rounds).
        per_round = [a / b for a, b in zip(vals[cores, name, l], vals[cores, name, ref]) if b]
        spread = f" ({min(per_round):.2f}-{max(per_round):.2f})" if len(per_round) > 1 else ""
        ratio.append(f"{r:.2f}x{spread}")
    line = [cores, name] + [fmt(med[l]) for l in labels] + ratio + [f"{cpu[l]:.0f}%" for l in labels]
    print("| " + " | ".join(line) + " |")
EOF
