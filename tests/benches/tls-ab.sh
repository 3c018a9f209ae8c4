#!/usr/bin/env bash
# What TLS costs on NVMe/TCP (issue 19): one fabrikd (ram drives, reactors on TARGET_CORES) whose
# port takes TLS and clear text (--tls allowed), and fabrik's host pinned to other cores, in
# clear text and over TLS (--tls-key, the same configured PSK) alternated figure by figure; the
# medians of the rounds, TLS over clear, and each side's CPU per I/O (the host's from its
# report, the target's from /proc over the measured run). Never in CI: it wants a machine with
# cores to spare (the H200 machine: 16).
#
#   tests/benches/tls-ab.sh [ROUNDS [SECS]]        (default 3 rounds of 3 s per figure)
#
# FABRIKD, FABRIK: the binaries (default build/release/). TARGET_CORES=0-3, HOST_CORE_SETS="8 8-11",
# N=4 drives, KEY: the PSK (default: a fixed SHA-256 test key).
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-3}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
FABRIKD=${FABRIKD:-$REPO/build/release/fabrikd}
FABRIK=${FABRIK:-$REPO/build/release/fabrik}
TARGET_CORES=${TARGET_CORES:-0-3}
HOST_CORE_SETS=${HOST_CORE_SETS:-"8 8-11"}
N=${N:-4}
KEY=${KEY:-NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:}
for b in "$FABRIKD" "$FABRIK"; do [ -x "$b" ] || { echo "no $b: cargo build --release first"; exit 1; }; done
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
printf '%s\n' "$KEY" >"$work/tls.psk"; chmod 600 "$work/tls.psk"
taskset -c "$TARGET_CORES" "$FABRIKD" --data-dir "$work/data" --listen "127.0.0.1:$port" --tls allowed \
  --tls-psk "$work/tls.psk" --api off --api-socket off --metrics off --backend ram --drives "$N" --box-name box \
  --drive-size 1G --cores "$TARGET_CORES" >"$work/fabrikd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
nqns=()
for i in $(seq 0 $((N - 1))); do nqns+=(-n "$(printf 'nqn.2024-01.io.fabrik:box:drive-%02d' "$i")"); done
target_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
expand() { python3 -c 'import sys
c=[]
for p in sys.argv[1].split(","):
    a,_,b=p.partition("-"); c+=range(int(a),int(b or a)+1)
print(",".join(map(str,c)))' "$1"; }
figures() { # host cores
  local c=$1
  echo "4k-randread-32-per-ns|--rw randread --bs 4k --iodepth $((32 * N / c)) --threads $c --worker-drives own"
  echo "128k-read-8-per-ns|--rw read --bs 128k --iodepth $((8 * N / c)) --threads $c"
}
: >"$work/results.tsv"
flip=0
hz=$(getconf CLK_TCK)
for cores in $HOST_CORE_SETS; do
  cpus=$(expand "$cores")
  for round in $(seq "$ROUNDS"); do
    while IFS='|' read -r name fargs; do
      order=(clear tls); flip=$((1 - flip)); [ $flip = 1 ] || order=(tls clear)
      for who in "${order[@]}"; do
        tls=(); [ "$who" = tls ] && tls=(--tls-key "$KEY")
        t0=$(target_ticks)
        # shellcheck disable=SC2086
        json=$(taskset -c "$cores" "$FABRIK" bench -a 127.0.0.1 -s "$port" "${nqns[@]}" --cpus "$cpus" \
          $fargs "${tls[@]}" --time "$SECS" --quiet --json 2>"$work/fabrik.err") ||
          { echo "fabrik failed ($who $name):"; tail -3 "$work/fabrik.err"; json='{}'; }
        t1=$(target_ticks)
        read -r v cpu tcpu <<<"$(python3 -c 'import json,sys
r=json.loads(sys.argv[1] or "{}"); iops=r.get("iops",0)
v=iops if sys.argv[2].startswith("4k") else r.get("bytes_per_sec",0)/1e9
# the target'"'"'s CPU over the whole run (connect and prefill included) per measured command
tc=(int(sys.argv[3])/int(sys.argv[4]))*1e6/(iops*float(sys.argv[5])) if iops else 0
print(v, r.get("cpu",{}).get("us_per_io",0), round(tc,2))' "$json" "$name" $((t1 - t0)) "$hz" "$SECS")"
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cores" "$name" "$who" "$v" "$cpu" "$tcpu" >>"$work/results.tsv"
        echo "cores $cores round $round $who $name: $v (host $cpu, target $tcpu us CPU per I/O)" >&2
      done
    done < <(figures "$(tr ',' '\n' <<<"$cpus" | wc -l)")
  done
done
echo
echo "Medians of $ROUNDS rounds, clear text and TLS alternated, $SECS s each; fabrikd on cores"
echo "$TARGET_CORES, $N ram drives, one port (--tls allowed). 4k: IOPS; 128k: GB/s; cpu: us per I/O."
python3 - "$work/results.tsv" <<'EOF'
import sys, statistics as st, collections
v = collections.defaultdict(list)
for cores, name, who, val, hc, tc in (l.split("\t") for l in open(sys.argv[1]) if l.strip()):
    v[(cores, name, who)].append((float(val), float(hc), float(tc)))
print(f"{'host cores':<11}{'figure':<24}{'clear':>12}{'TLS':>12}{'TLS/clear':>11}{'host cpu clear/TLS':>20}{'target cpu clear/TLS':>22}")
for cores, name in sorted({(k[0], k[1]) for k in v}, key=lambda k: (len(k[0]), k)):
    m = {w: [st.median(x[i] for x in v[(cores, name, w)]) for i in range(3)] for w in ("clear", "tls")}
    fmt = (lambda x: f"{x:,.0f}") if name.startswith("4k") else (lambda x: f"{x:.2f}")
    r = m["tls"][0] / m["clear"][0] if m["clear"][0] else 0
    print(f"{cores:<11}{name:<24}{fmt(m['clear'][0]):>12}{fmt(m['tls'][0]):>12}{r:>10.2f}x"
          f"{m['clear'][1]:>10.2f} / {m['tls'][1]:<7.2f}{m['clear'][2]:>12.2f} / {m['tls'][2]:<7.2f}")
EOF
