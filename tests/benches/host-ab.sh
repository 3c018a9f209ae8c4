#!/usr/bin/env bash
# fabrik's host against SPDK's spdk_nvme_perf, side by side (issue 17): one target (SPDK's
# nvmf_tgt on cores of its own, N null namespaces), the two initiators pinned to the same cores
# and alternated figure by figure; the medians of the rounds, the ratios to perf, and each
# initiator's CPU per I/O. Never in CI: it needs the prebuilt SPDK of ../shared/spdk and a machine
# with cores to spare (the H200 machine: 16).
#
#   tests/benches/host-ab.sh [ROUNDS [SECS]]        (default 3 rounds of 3 s per figure)
#
# SPDK=dir of the prebuilt SPDK (default ../shared/spdk beside the repo).
# INITIATORS="perf fabrik=PATH [base=PATH ...]": what to alternate; "perf" is spdk_nvme_perf,
#   any other LABEL=PATH a fabrik binary (default: perf and build/release/fabrik).
# TARGET_CORES=0-3 (nvmf_tgt). HOST_CORE_SETS="8 8-11": initiator cores per table.
# N=4 namespaces. FABRIK_ARGS: more arguments for every fabrik bench (e.g. "--poll-us 50").
#
# The same commands in flight for both: perf gives each core the namespaces i mod cores, with -q
# commands per namespace; fabrik's --iodepth is per worker over its drives; so "32 per
# namespace" is perf -q 32 against fabrik --iodepth 32*N/threads. For 4K reads fabrik's workers
# get drives of their own as perf's cores do (--worker-drives own: fewer, fuller sends); for
# 128K reads each worker sends to every drive (the default: one connection per worker does not
# keep up with large transfers, see the README). perf polls its cores
# at 100 %: its CPU per I/O is its cores over its IOPS; fabrik's is its own report's (user +
# system time over the measured phase, per command).
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-3}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SPDK=${SPDK:-$REPO/../shared/spdk}
INITIATORS=${INITIATORS:-"perf fabrik=$REPO/build/release/fabrik"}
TARGET_CORES=${TARGET_CORES:-0-3}
HOST_CORE_SETS=${HOST_CORE_SETS:-"8 8-11"}
N=${N:-4}
[ -x "$SPDK/bin/nvmf_tgt" ] || { echo "no SPDK in $SPDK (set SPDK=...)"; exit 1; }
for i in $INITIATORS; do
  [ "$i" = perf ] || [ -x "${i#*=}" ] || { echo "no fabrik at ${i#*=}: cargo build --release first"; exit 1; }
done
# shellcheck source=/dev/null
. "$SPDK/env.sh"
BACKEND=null
# shellcheck source=tests/benches/spdk-lib.sh
. "$REPO/tests/benches/spdk-lib.sh"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
pid=
trap 'stop_target; rm -rf "$work"' EXIT
start_target spdk "$TARGET_CORES"
nqns=()
for i in $(seq 0 $((N - 1))); do nqns+=(-n "$(printf 'nqn.2024-01.io.fabrik:box:drive-%02d' "$i")"); done

expand() { # taskset list -> comma-separated cores (fabrik's --cpus)
  python3 -c 'import sys
c=[]
for p in sys.argv[1].split(","):
    a,_,b=p.partition("-"); c+=range(int(a),int(b or a)+1)
print(",".join(map(str,c)))' "$1"
}

# name|namespaces|perf arguments|fabrik arguments (per-core figures say what each core has).
# Both initiators have the same shape: perf gives each core its own namespaces, one queue pair
# each; fabrik's workers have drives of their own (--worker-drives own), one queue each.
figures() { # host cores
  local c=$1 fdepth=$((32 * N / $1)) fdepth128=$((8 * N / $1))
  echo "4k-randread-32-per-ns|$N|-q 32 -o 4096 -w randread|--rw randread --bs 4k --iodepth $fdepth --threads $c --worker-drives own"
  echo "128k-read-8-per-ns|$N|-q 8 -o 131072 -w read|--rw read --bs 128k --iodepth $fdepth128 --threads $c --worker-drives own"
  [ "$c" != 1 ] || echo "4k-qd1|1|-q 1 -o 4096 -w randread|--rw randread --bs 4k --iodepth 1 --threads 1"
}

: >"$work/results.tsv"
flip=0
for cores in $HOST_CORE_SETS; do
  cpus=$(expand "$cores")
  ncores=$(tr ',' '\n' <<<"$cpus" | wc -l)
  mask=$(mask_of "$cores")
  for round in $(seq "$ROUNDS"); do
    while IFS='|' read -r name n pargs fargs; do
      # shellcheck disable=SC2206
      order=($INITIATORS)
      flip=$((1 - flip))
      [ $flip = 1 ] || mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
      for i in "${order[@]}"; do
        who=${i%%=*}
        if [ "$who" = perf ]; then
          # shellcheck disable=SC2086
          out=$("$SPDK/perf.sh" "$n" "$port" box -c "$mask" $pargs -t "$SECS" 2>&1) || true
          read -r iops mibs avg <<<"$(perf_figures "$out" "$name")"
          cpu=$(awk -v c="$ncores" -v i="$iops" 'BEGIN{ if (i > 0) printf "%.2f", c * 1e6 / i; else print 0 }')
        else
          # shellcheck disable=SC2086
          json=$(taskset -c "$cores" "${i#*=}" bench -a 127.0.0.1 -s "$port" "${nqns[@]:0:$((2 * n))}" --cpus "$cpus" \
            $fargs --time "$SECS" --quiet --json ${FABRIK_ARGS:-} 2>"$work/fabrik.err") ||
            { echo "fabrik failed for $name:"; tail -3 "$work/fabrik.err"; json='{}'; }
          read -r iops mibs avg cpu <<<"$(python3 -c 'import json,sys
r=json.loads(sys.argv[1] or "{}")
print(r.get("iops",0), r.get("bytes_per_sec",0)/1048576, r.get("lat_us",{}).get("avg",0), r.get("cpu",{}).get("us_per_io",0))' "$json")"
        fi
        case $name in
          *qd1) v=$avg ;;
          128k*) v=$(awk -v m="$mibs" 'BEGIN{printf "%.2f", m*1048576/1e9}') ;;
          *) v=$iops ;;
        esac
        printf '%s\t%s\t%s\t%s\t%s\n' "$cores" "$name" "$who" "$v" "$cpu" >>"$work/results.tsv"
        echo "cores $cores round $round $who $name: $v (CPU per I/O ${cpu} us)" >&2
      done
    done < <(figures "$ncores")
  done
done

echo
echo "Medians of $ROUNDS rounds, initiators alternated figure by figure, $SECS s each; SPDK nvmf_tgt"
echo "on cores $TARGET_CORES, $N null namespaces. 4k/128k: IOPS / GB/s (higher is better); qd1:"
echo "average latency in us (lower is better); cpu: us of CPU per I/O. Ratios: to perf."
# shellcheck disable=SC2046
python3 - "$work/results.tsv" $(for i in $INITIATORS; do echo "${i%%=*}"; done) <<'EOF'
import sys, statistics, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
v = collections.defaultdict(list)
c = collections.defaultdict(list)
for cores, name, who, val, cpu in rows:
    v[(cores, name, who)].append(float(val))
    c[(cores, name, who)].append(float(cpu))
labels = sys.argv[2:]
others = [l for l in labels if l != "perf"]
keys = sorted({(r[0], r[1]) for r in rows}, key=lambda k: (len(k[0]), k[0], k[1]))
head = f"{'host cores':<11}{'figure':<24}{'perf':>12}"
for l in others:
    head += f"{l:>12}{'ratio':>8}"
head += f"{'cpu/IO perf':>13}" + "".join(f"{l:>10}" for l in others)
print(head)
for cores, name in keys:
    fmt = (lambda x: f"{x:,.0f}") if name.startswith("4k-rand") else (lambda x: f"{x:.2f}")
    p = statistics.median(v[(cores, name, "perf")])
    line = f"{cores:<11}{name:<24}{fmt(p):>12}"
    for l in others:
        f = statistics.median(v[(cores, name, l)])
        ratio = (p / f if name.endswith("qd1") else f / p) if p and f else 0
        line += f"{fmt(f):>12}{ratio:>7.2f}x"
    line += f"{statistics.median(c[(cores, name, 'perf')]):>13.2f}"
    line += "".join(f"{statistics.median(c[(cores, name, l)]):>10.2f}" for l in others)
    print(line)
print("(qd1 ratio: perf's latency over fabrik's, so higher is better everywhere)")
EOF
