#!/usr/bin/env bash
# The README's loopback figures with `fabrik bench`: fabrikd (ram backend) and fabrik on one
# machine, each figure next to raw loopback TCP measured in the same run (`--reference`, half
# before and half after each figure). Several rounds; the medians are printed with the goals.
#
#   tests/benches/fabrik-bench.sh [ROUNDS [SECS]]      (default 3 rounds of 3 s per figure)
#
# BIN=dir of fabrik and fabrikd (default: $CARGO_TARGET_DIR/release, else build/release).
# PIN=1 pins fabrikd to CPU 0 and fabrik to CPU 1 (the raw TCP reference: its client on CPU 1,
# its serving end on CPU 0, as the target); the default
# PIN=0 lets them float, which suits a machine shared with other work.
# Needs jq.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-3}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$REPO/build}/release}
PIN=${PIN:-0}
command -v jq >/dev/null || { echo "jq is needed"; exit 1; }
[ -x "$BIN/fabrik" ] && [ -x "$BIN/fabrikd" ] ||
  { echo "no fabrik/fabrikd in $BIN: cargo build --release first"; exit 1; }

target_cpu=() host_cpu=() reference_cpu=()
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  # The raw reference's serving end sits on the target's core, so it crosses cores as the
  # NVMe/TCP traffic does.
  target_cpu=(taskset -c 0) host_cpu=(taskset -c 1) reference_cpu=(--reference-cpu 0)
fi
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"${target_cpu[@]}" "$BIN/fabrikd" --data-dir "$work" --listen "127.0.0.1:$port" --backend ram \
  --drives 1 --drive-size 1G --box-name bench >"$work/fabrikd.log" 2>&1 &
fabrikd=$!
trap 'kill $fabrikd 2>/dev/null; wait $fabrikd 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do grep -q "listener" "$work/fabrikd.log" && break; sleep 0.1; done
nqn=nqn.2024-01.io.fabrik:bench:drive-00
bench() { "${host_cpu[@]}" "$BIN/fabrik" bench -a 127.0.0.1 -s "$port" -n "$nqn" --quiet "$@"; }

# Reads should touch allocated memory: fill the drive once.
bench --rw write --bs 1m --iodepth 4 --size 1g >/dev/null

figures=(
  "qd1|--rw randread --bs 4k --iodepth 1"
  "qd32|--rw randread --bs 4k --iodepth 32"
  "read128k|--rw read --bs 128k --iodepth 8"
  "write128k|--rw write --bs 128k --iodepth 8"
)
: >"$work/results.jsonl"
for round in $(seq "$ROUNDS"); do
  for f in "${figures[@]}"; do
    name=${f%%|*}
    # shellcheck disable=SC2086
    bench ${f#*|} --time "$SECS" --reference "$SECS" "${reference_cpu[@]}" --json |
      jq -c --arg name "$name" --argjson round "$round" '{name: $name, round: $round} + .' \
        >>"$work/results.jsonl"
  done
done

jq -rs --argjson rounds "$ROUNDS" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def of($n): map(select(.name == $n));
  def ratio: map(.bytes_per_sec / .reference.tcp_bytes_per_sec * 100) | median;
  (of("qd1")) as $qd1 | (of("qd32")) as $qd32 | (of("read128k")) as $rd | (of("write128k")) as $wr |
  (map(.reference.tcp_bytes_per_sec) | median / 1e9) as $raw |
  (map(.reference.tcp_rtt_us) | median) as $rtt |
  ($qd1 | map(.lat_us.avg - .reference.tcp_rtt_us) | median) as $over |
  ($qd1 | map(.lat_us.p50 - .reference.tcp_rtt_p50_us) | median) as $over50 |
  (map(.reference.tcp_rtt_p50_us) | median) as $rtt50 |
  ($rd | ratio) as $rdratio |
  [
    "fabrik bench loopback figures (ram backend, medians of \($rounds) rounds)",
    "  raw TCP loopback throughput        \($raw * 100 | round / 100) GB/s",
    "  raw TCP round trip (72 B / 4 KiB)  avg \($rtt * 10 | round / 10) us, p50 \($rtt50 * 10 | round / 10) us",
    "  4 KiB randread QD1                 \($qd1 | map(.iops) | median | round) IOPS",
    "  4 KiB randread QD1 latency         avg \($qd1 | map(.lat_us.avg) | median * 10 | round / 10) us, p50 \($qd1 | map(.lat_us.p50) | median * 10 | round / 10) us, p99 \($qd1 | map(.lat_us.p99) | median * 10 | round / 10) us",
    "    over the raw round trip          avg \($over * 10 | round / 10) us, p50 \($over50 * 10 | round / 10) us (goal: 15 us or less) \(if $over <= 15 then "MET" else "NOT MET" end)",
    "  4 KiB randread QD32                \($qd32 | map(.iops) | median | round) IOPS",
    "  128 KiB read QD8                   \($rd | map(.bytes_per_sec) | median / 1e7 | round / 100) GB/s, \($rdratio | round) % of raw (goal: 80 %) \(if $rdratio >= 80 then "MET" else "NOT MET" end)",
    "  128 KiB write QD8                  \($wr | map(.bytes_per_sec) | median / 1e7 | round / 100) GB/s, \($wr | ratio | round) % of raw",
    "  host CPU (QD1 / 128K read)         \($qd1 | map(.cpu.percent) | median | round) % / \($rd | map(.cpu.percent) | median | round) % of a core",
    "  host CPU per I/O (QD1 / QD32)      \($qd1 | map(.cpu.us_per_io) | median * 100 | round / 100) us / \($qd32 | map(.cpu.us_per_io) | median * 100 | round / 100) us"
  ] | .[]' "$work/results.jsonl"
[ -n "${KEEP:-}" ] && cp "$work/results.jsonl" "$KEEP"
true
