#!/usr/bin/env bash
# tests/benches/gpu-bench.sh - GPU memory against host memory, in the same run, on a machine
# with an NVIDIA GPU: fabrikd (ram backend) over loopback NVMe/TCP, `fabrik bench --mem gpu`
# and `--mem host` alternated per point over block sizes, queue depths and both directions;
# then --verify runs into and from GPU memory, a checkpoint from GPU memory, `fabrik gpu` (the
# dma-buf export check) and what NVMe/RDMA says on a machine without an RDMA NIC.
#
#   tests/benches/gpu-bench.sh [BIN_DIR] [OUT_DIR]
#
# BIN_DIR holds release `fabrik` and `fabrikd` (default build/release); OUT_DIR gets
# results.jsonl (every report), table.txt and the logs (default /tmp/gpu-bench).
# SECS (3) seconds per point, THREADS (4), DRIVES (4), POINTS ("4k:1 4k:32 128k:8 128k:32
# 1m:8 1m:32" as bs:iodepth), RWS ("read write"), GPU (gpu = GPU 0), GPU_COPY (bench
# --gpu-copy, default its own; several, e.g. "4m 1m", run each as "gpu@SIZE"), REPEAT (1: each host/gpu pair this many times, alternated; the
# table gives the mean), OTHER (another build's `fabrik`: its host-memory runs are put beside,
# in the same alternation, e.g. to compare with the previous release's reference).
set -uo pipefail
BIN=${1:-build/release}
OUT=${2:-/tmp/gpu-bench}
SECS=${SECS:-3}
THREADS=${THREADS:-4}
DRIVES=${DRIVES:-4}
POINTS=${POINTS:-"4k:1 4k:32 128k:8 128k:32 1m:8 1m:32"}
GPU=${GPU:-gpu}
FABRIK=$BIN/fabrik
mkdir -p "$OUT"
: > "$OUT/results.jsonl"

echo "== machine"
nvidia-smi -L 2>&1 | head -8
echo "RDMA devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"
echo "nvidia-peermem: $([ -d /sys/module/nvidia_peermem ] && echo loaded || echo 'not loaded')"
lscpu 2>/dev/null | grep -E "^Model name|^CPU\(s\)|^L[23]|^NUMA node" | sed "s/  */ /g"

echo "== fabrik gpu"
"$FABRIK" gpu 2>&1 | tee "$OUT/fabrik-gpu.txt"
"$FABRIK" gpu --json > "$OUT/fabrik-gpu.json" 2>&1

DATA=$(mktemp -d)
"$BIN/fabrikd" --data-dir "$DATA" --backend ram --drives "$DRIVES" --drive-size 4G \
  --box-name gpubench --listen 127.0.0.1:4420 --api off --metrics off > "$OUT/fabrikd.log" 2>&1 &
FPID=$!
trap 'kill $FPID 2>/dev/null; wait $FPID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/4420) 2>/dev/null && break
  sleep 0.1
done
NQNS=()
for i in $(seq 0 $((DRIVES - 1))); do NQNS+=(-n "$(printf 'nqn.2024-01.io.fabrik:gpubench:drive-%02d' "$i")"); done
A=(-a 127.0.0.1 -s 4420 "${NQNS[@]}" --threads "$THREADS" --quiet --json)

run() { # label, args...
  local label=$1; shift
  local out bin=$FABRIK
  case $label in *" other") bin=$OTHER ;; esac
  if out=$("$bin" bench "${A[@]}" "$@" 2> "$OUT/err.txt"); then
    printf '%s\n' "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin); r["label"]=sys.argv[1]; print(json.dumps(r))' "$label" >> "$OUT/results.jsonl"
  else
    echo "FAILED: $label: $(tail -3 "$OUT/err.txt")"
    return 1
  fi
}

# The ram backend gets its memory at a block's first write: write every drive once, so that no
# measured run pays for that (the first write run would, and only it).
echo "== filling the drives"
"$FABRIK" bench "${A[@]}" --rw write --bs 1m --iodepth 8 --size "$((DRIVES * 4))g" > /dev/null || exit 1

echo "== GPU vs host memory, ${SECS}s per point, $THREADS threads, $DRIVES drives"
rc=0
for rw in ${RWS:-read write}; do
  for p in $POINTS; do
    bs=${p%%:*}; qd=${p##*:}
    for _ in $(seq "${REPEAT:-1}"); do
      # Alternate, so a drift of the machine skews both alike.
      run "$rw bs=$bs qd=$qd host" --rw $rw --bs "$bs" --iodepth "$qd" --time "$SECS" --mem host || rc=1
      if [ "$(wc -w <<< "${GPU_COPY:-}")" -gt 1 ]; then
        for c in $GPU_COPY; do
          run "$rw bs=$bs qd=$qd gpu@$c" --rw $rw --bs "$bs" --iodepth "$qd" --time "$SECS" \
            --mem "$GPU" --gpu-copy "$c" || rc=1
        done
      else
        run "$rw bs=$bs qd=$qd gpu" --rw $rw --bs "$bs" --iodepth "$qd" --time "$SECS" --mem "$GPU" \
          ${GPU_COPY:+--gpu-copy "$GPU_COPY"} || rc=1
      fi
      if [ -n "${OTHER:-}" ]; then
        run "$rw bs=$bs qd=$qd other" --rw $rw --bs "$bs" --iodepth "$qd" --time "$SECS" --mem host || rc=1
      fi
    done
  done
done

echo "== verify through GPU memory"
run "verify write 1m gpu" --rw write --bs 1m --iodepth 8 --size 2g --verify --mem "$GPU" || rc=1
run "verify randread 128k gpu" --rw randread --bs 128k --iodepth 16 --size 2g --verify \
  --verify-seed 7 --mem "$GPU" || rc=1

python3 - "$OUT/results.jsonl" <<'EOF' | tee "$OUT/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by, runs = {}, {}
for r in rows:
    by[r["label"]] = r
    runs.setdefault(r["label"], []).append(r)
mean = lambda label, f: sum(map(f, runs[label])) / len(runs[label])
gbs = lambda label: mean(label, lambda r: r["bytes_per_sec"] / 1e9)
# CPU seconds (user, system) the initiator spent per GB moved: where a CPU-bound run's time goes.
cpu = lambda label: (mean(label, lambda r: r["cpu"]["user_s"] / (r["bytes"] / 1e9)),
                     mean(label, lambda r: r["cpu"]["sys_s"] / (r["bytes"] / 1e9)))
other = any(l.endswith(" other") for l in runs)
head = f'{"point":<30}{"host GB/s":>10}{"GB/s":>8}{"vs host":>9}'
if other:
    head += f'{"other host":>11}{"vs other":>9}'
print(head + '  usr/sys s/GB (host | this)  runs  path  (staging per run: copies, waits, blocked)')
for label, r in by.items():
    point, _, memory = label.rpartition(" ")
    if not memory.startswith("gpu") or label.startswith("verify"):
        continue
    h = point + " host"
    if h not in runs:
        continue
    g, hh = gbs(label), gbs(h)
    line = f'{point + " " + memory:<30}{hh:>10.2f}{g:>8.2f}{g / hh * 100:>8.0f}%'
    o = point + " other"
    if other and o in runs:
        line += f'{gbs(o):>11.2f}{g / gbs(o) * 100:>8.0f}%'
    (hu, hs), (gu, gs) = cpu(h), cpu(label)
    line += f'  {hu:.3f}/{hs:.3f} | {gu:.3f}/{gs:.3f}'
    line += f'  {len(runs[label]):>4}  {r["memory"]["path"]}'
    if r["memory"].get("staging"):
        line += '  ' + ', '.join(f'{mean(label, lambda r: r["memory"]["staging"][k]):.0f}' for k in ("copies", "waits", "blocked"))
    print(line)
for label, r in by.items():
    if label.startswith("verify"):
        v = r["verify"]
        print(f'{label}: {r["bytes_per_sec"] / 1e9:.2f} GB/s, {v["blocks_checked"]} blocks checked, {v["errors"]} errors, path {r["memory"]["path"]}')
m = next((r["memory"] for r in rows if r.get("memory")), None)
if m:
    print("GPU:", m["gpu"]["name"], m["gpu"]["pci_addr"], "NUMA", m["gpu"]["numa_node"])
    for p in m["paths"][:1]:
        print("path:", p)
EOF

echo "== checkpoint from GPU memory"
"$FABRIK" bench checkpoint -a 127.0.0.1 -s 4420 "${NQNS[@]}" --count 3 --size 2g --bs 1m \
  --iodepth 8 --threads "$THREADS" --mem "$GPU" 2>&1 | tail -6 || rc=1

echo "== NVMe/RDMA on this machine"
"$FABRIK" bench -t rdma -a 127.0.0.1 -s 4420 "${NQNS[@]:0:2}" --time 1 --mem "$GPU" 2>&1 | grep -v '^ *[0-9]*: \|^Stack\|^ *at ' | head -4
exit $rc
