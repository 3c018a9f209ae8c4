#!/usr/bin/env bash
# Volumes against each other on the same kind of members, alternated figure by figure, medians:
# the ratios issue 20 sets goals for. Never in CI (a machine with cores to spare: the H200 one).
#
#   tests/benches/raid-ab.sh [ROUNDS [SECS]]          (default 3 rounds of 5 s per figure)
#
# fabrikd (BIN/fabrikd, default build/release) on TARGET_CORES (default 0-3) with 15 ram drives
# of DRIVE_SIZE (default 8G, mapped as written), three volumes of 5 members, 64 KiB strips:
#   r0: raid0 (00-04)    r5: raid5 (05-09)    r5d: raid5 (10-14) with member 12 failed
# `fabrik bench` (BIN/fabrik) on HOST_CORES (default 8,...,15, THREADS=4 workers) over SIZE (4G)
# of each volume, written whole first. Figures:
#   1M sequential write, QD8 (whole stripes):    r5 / r0     goal >= 0.8
#   4K random read, QD32:                        r5 / r0     goal 1.0 (within 5 %)
#   4K random write, QD32 (read-modify-write):   r5 / r0     (no goal: what parity costs)
#   128K sequential read, QD8:                   r5d / r5    goal >= 0.5 (degraded / healthy)
# Also prints the parity kernels' speed on one core (examples/parity_speed, if built; PARITY=0:
# not). FIGURES=REGEX measures only the figures whose name matches. Each figure's ratio is the
# median of the rounds' own ratios (each round runs A and B back to back, so drift cancels).
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-5}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BIN=${BIN:-$REPO/build/release}
TARGET_CORES=${TARGET_CORES:-0-3}
HOST_CORES=${HOST_CORES:-8,9,10,11,12,13,14,15}  # a list: taskset and bench --cpus both take it
THREADS=${THREADS:-4}
DRIVE_SIZE=${DRIVE_SIZE:-8G}
SIZE=${SIZE:-4G}
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
export FABRIK_DATA_DIR=$work/data
fpid=
trap '[ -n "$fpid" ] && kill "$fpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

taskset -c "$TARGET_CORES" "$BIN/fabrikd" --data-dir "$FABRIK_DATA_DIR" --listen "127.0.0.1:$port" \
  --api off --metrics off --drives 15 --drive-size "$DRIVE_SIZE" --backend ram \
  --cores "$TARGET_CORES" >"$work/fabrikd.log" 2>&1 &
fpid=$!
for _ in $(seq 100); do [ -S "$FABRIK_DATA_DIR/api.sock" ] && break; sleep 0.1; done
vol() { "$BIN/fabrik" volumes "$@" >/dev/null; }
vol create r0 --level raid0 --drives 00,01,02,03,04
vol create r5 --level raid5 --drives 05,06,07,08,09
vol create r5d --level raid5 --drives 10,11,12,13,14
vol fail r5d 12
nqn() { "$BIN/fabrik" volumes --json show "$1" | grep -o '"nqn": *"[^"]*"' | cut -d'"' -f4; }

bench() {  # volume args... -> "iops bytes_per_sec"
  taskset -c "$HOST_CORES" "$BIN/fabrik" bench -a 127.0.0.1 -s "$port" -n "$(nqn "$1")" \
    --cpus "$HOST_CORES" --threads "$THREADS" --size "$SIZE" --json --quiet "${@:2}" |
    tr -d ' \n' | sed 's/.*"iops":\([0-9.e+]*\),"bytes_per_sec":\([0-9.e+]*\).*/\1 \2/'
}
echo "filling $SIZE of each volume"
for v in r0 r5 r5d; do bench "$v" --rw write --bs 1M --iodepth 8 --time 60 >/dev/null; done

figures=(
  "1M-write-qd8|r0 r5|--rw write --bs 1M --iodepth 8|bw"
  "4K-randread-qd32|r0 r5|--rw randread --bs 4k --iodepth 32|iops"
  "4K-randwrite-qd32|r0 r5|--rw randwrite --bs 4k --iodepth 32|iops"
  "128K-read-qd8|r5 r5d|--rw read --bs 128k --iodepth 8|bw"
)
[ -n "${FIGURES:-}" ] && mapfile -t figures < <(printf '%s\n' "${figures[@]}" | grep -E "^[^|]*(${FIGURES})")
median() { sort -g | awk '{a[NR]=$1} END{print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A got=() ratios=()
for r in $(seq "$ROUNDS"); do
  for f in "${figures[@]}"; do
    IFS='|' read -r name vols args unit <<<"$f"
    # Alternate which goes first.
    order=$vols; [ $((r % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$vols" | tac | tr '\n' ' ')
    declare -A round=()
    for v in $order; do
      # shellcheck disable=SC2086
      read -r iops bps <<<"$(bench "$v" $args --time "$SECS")"
      val=$([ "$unit" = iops ] && echo "$iops" || echo "$bps")
      got[$name,$v]+="$val "
      round[$v]=$val
      printf '  round %s %-18s %-4s %s\n' "$r" "$name" "$v" \
        "$([ "$unit" = iops ] && awk -v x="$iops" 'BEGIN{printf "%.0fK IOPS", x/1e3}' || awk -v x="$bps" 'BEGIN{printf "%.2f GB/s", x/1e9}')"
    done
    read -r a b <<<"$vols"
    ratios[$name]+="$(awk -v a="${round[$a]}" -v b="${round[$b]}" 'BEGIN{printf "%.4f", b/a}') "
  done
done
echo
echo "| figure | A | B | B/A (median of $ROUNDS rounds' ratios) | rounds' ratios |"
echo "|---|---|---|---|---|"
for f in "${figures[@]}"; do
  IFS='|' read -r name vols _ unit <<<"$f"
  read -r a b <<<"$vols"
  ma=$(tr ' ' '\n' <<<"${got[$name,$a]}" | grep . | median)
  mb=$(tr ' ' '\n' <<<"${got[$name,$b]}" | grep . | median)
  fmt() { [ "$unit" = iops ] && awk -v x="$1" 'BEGIN{printf "%.0fK IOPS", x/1e3}' || awk -v x="$1" 'BEGIN{printf "%.2f GB/s", x/1e9}'; }
  mr=$(tr ' ' '\n' <<<"${ratios[$name]}" | grep . | median)
  echo "| $name | $a $(fmt "$ma") | $b $(fmt "$mb") | $(printf '%.2f' "$mr") | ${ratios[$name]}|"
done
if [ "${PARITY:-1}" != 0 ] && [ -x "$BIN/examples/parity_speed" ]; then
  echo
  echo "parity on one core (taskset -c ${TARGET_CORES%%[-,]*}):"
  taskset -c "${TARGET_CORES%%[-,]*}" "$BIN/examples/parity_speed" 2
fi
grep -E 'ERROR|panicked' "$work/fabrikd.log" | head -5 || true
