#!/usr/bin/env bash
# What one I/O costs the target's cores, fabrikd beside SPDK's nvmf_tgt: CPU time per I/O split
# into user, kernel and softirq (from /proc/stat of the target cores), and, where perf can count
# tracepoints, system calls, packets sent and pure ACKs among them per I/O. The same set-up as
# spdk-ab.sh (which see: N namespaces, the targets pinned to CORES, spdk_nvme_perf on
# PERF_CORES), alternated round by round. Never in CI.
#
#   tests/benches/spdk-cost.sh [ROUNDS [SECS]]       (default 3 rounds, 4 s measured per figure)
#
# TARGETS, CORES=0-3, PERF_CORES=0xFF00, BACKEND=null|ram, N=4, SPDK=dir: as in spdk-ab.sh.
# WORKLOAD="-q 32 -o 4096 -w randread". PERF="perf" (a machine without it: a copied perf run
# through its own loader, as in spdk-profile.sh); PERF= (empty) skips the tracepoint counts.
#
# What it showed (null drives, 4K randread QD32, Dec 2026):
# - H200 machine, 4 cores (the counts by hand, before this script): fabrikd made fewer system
#   calls per I/O than nvmf_tgt (0.093 against 0.122: nvmf_tgt polls epoll without waiting) and
#   sent more packets (0.120 against 0.100); per I/O its cores spent 1.13 us in the kernel and
#   0.66 us in user space, nvmf_tgt's 0.82 and 0.53 (its busy polling included).
# - A 2-core machine (the dev box), 1 core: 0.14-0.17 packets per I/O against 0.10, of them 0.028-0.037
#   pure ACKs against 0.007. Their call stacks: fabrikd's receives, sending the ACK for the
#   commands they read. Likely cause: a receive that takes more than one of the host's segments
#   (27 commands per receive against 22 on the H200 machine) is acknowledged at once, as TCP acknowledges every
#   second segment.
# So the kernel's larger share of fabrikd's I/O is not system calls.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-4}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SPDK=${SPDK:-$REPO/../shared/spdk}
TARGETS=${TARGETS:-"spdk fabrikd=$REPO/build/release/fabrikd"}
CORES=${CORES:-0-3}
PERF_CORES=${PERF_CORES:-0xFF00}
BACKEND=${BACKEND:-null}
WORKLOAD=${WORKLOAD:-"-q 32 -o 4096 -w randread"}
PERF=${PERF-perf}
N=${N:-4}
[ -x "$SPDK/bin/nvmf_tgt" ] || { echo "no SPDK in $SPDK (set SPDK=...)"; exit 1; }
# shellcheck source=/dev/null
. "$SPDK/env.sh"
# shellcheck source=tests/benches/spdk-lib.sh
. "$REPO/tests/benches/spdk-lib.sh"
hugepages_for_malloc
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
pid=
trap 'stop_target; rm -rf "$work"' EXIT

cpus=$(python3 -c 'import sys
for p in sys.argv[1].split(","):
    a,_,b=p.partition("-"); b=b or a
    print(*range(int(a),int(b)+1))' "$CORES" | tr '\n' ' ')

# user, system, softirq and idle jiffies summed over the target cores
cpu_jiffies() {
  awk -v want=" $cpus " '$1 ~ /^cpu[0-9]+$/ { c = substr($1, 4); if (index(want, " " c " ")) {
    u += $2 + $3; s += $4; q += $7 + $8; i += $5 + $6 } } END { print u, s, q, i }' /proc/stat
}

# tracepoint counts over SECS on the target cores: system calls, packets sent, pure ACKs (a
# packet of headers only: under 100 bytes on loopback)
trace_counts() {
  [ -n "$PERF" ] || { echo "- - -"; return; }
  # shellcheck disable=SC2086
  $PERF stat -a -C "$CORES" -x, -e raw_syscalls:sys_enter -e net:net_dev_xmit \
    -e net:net_dev_xmit --filter 'len < 100' -o "$work/stat.csv" -- sleep "$SECS" >/dev/null 2>&1 ||
    { echo "- - -"; return; }
  awk -F, '$1 ~ /^[0-9]+$/ { printf "%s ", $1 } END { print "" }' "$work/stat.csv"
}

printf '%-10s %5s %10s %8s %8s %8s %8s %9s %8s %8s\n' target round IOPS "us/IO" user kernel softirq "syscalls" packets "pure-ack"
for r in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    start_target "$t" "$CORES"
    # shellcheck disable=SC2086
    "$SPDK/perf.sh" "$N" "$port" box -c "$PERF_CORES" $WORKLOAD -t $((2 * SECS + 4)) >"$work/perf.out" 2>&1 &
    load=$!
    sleep 2
    read -r u0 s0 q0 _ < <(cpu_jiffies)
    sleep "$SECS"
    read -r u1 s1 q1 _ < <(cpu_jiffies)
    read -r calls packets acks < <(trace_counts)
    wait "$load" || true
    stop_target
    iops=$(awk '/^Total/ { print $3 }' "$work/perf.out" | tail -1)
    hz=$(getconf CLK_TCK)
    python3 - "$t" "$r" "$iops" "$hz" "$SECS" "$u0" "$s0" "$q0" "$u1" "$s1" "$q1" "$calls" "$packets" "$acks" <<'EOF'
import sys
t, r, iops, hz, secs = sys.argv[1].split("=")[0], sys.argv[2], float(sys.argv[3] or 0), int(sys.argv[4]), float(sys.argv[5])
u0, s0, q0, u1, s1, q1 = map(int, sys.argv[6:12])
ios = iops * secs or 1
us = lambda j: j / hz * 1e6 / ios
per = lambda v: "-" if v == "-" else "%.3f" % (int(v) / ios)
user, kernel, softirq = us(u1 - u0), us(s1 - s0), us(q1 - q0)
print("%-10s %5s %10.0f %8.2f %8.2f %8.2f %8.2f %9s %8s %8s" % (t, r, iops, user + kernel + softirq,
      user, kernel, softirq, per(sys.argv[12]), per(sys.argv[13]), per(sys.argv[14])))
EOF
  done
done
