#!/bin/bash
# rdma-ab-guest.sh - the guest side of rdma-ab.sh (which see): /share/bin/fabrikd-LABEL for
# each of LABELS, and nvmet-rdma, alternated for ROUNDS rounds over Soft-RoCE.
set -u
. /vmh/lib.sh
args_to_env "$@"
ROUNDS=${ROUNDS:-3} SECS=${SECS:-8} LABELS=${LABELS:?} BACKEND=${BACKEND:-null}
rxe_pair_setup >/dev/null || { echo "FAIL: Soft-RoCE setup"; exit 1; }
# MTU=N: the veth pair's MTU (Soft-RoCE takes the largest RoCE MTU under it: 1500 gives 1024).
if [ -n "${MTU:-}" ]; then ip link set veth0 mtu "$MTU"; ip link set veth1 mtu "$MTU"; fi
ibv_devinfo 2>/dev/null | awk '/hca_id/ {d = $2} /active_mtu/ {printf "%s RoCE MTU %s; ", d, $2} END {print ""}'
ping -c1 -W2 "$RXE_IP0" >/dev/null 2>&1
TRADDR=$RXE_IP0 KNQN=nqn.2024-01.io.fabrik:ab:nvmet
modprobe null_blk nr_devices=1 gb=1 bs=4096 && modprobe nvmet-rdma || { echo "FAIL: null_blk/nvmet-rdma"; exit 1; }
for i in $(seq 1 50); do [ -b /dev/nullb0 ] && break; sleep 0.1; done
nvmet_export "$KNQN" /dev/nullb0 rdma "$TRADDR" 4421 1 >/dev/null || { echo "FAIL: nvmet export"; exit 1; }

fio_figure() {  # dev rw bs iodepth numjobs -> IOPS (4k) or MB/s (terse v3: read bw $7, write $48)
  local out=/tmp/fio.out
  fio --name=ab --filename="$1" --ioengine=libaio --direct=1 --rw="$2" --bs="$3" --iodepth="$4" \
      --numjobs="$5" --group_reporting --time_based --runtime="$SECS" --output-format=terse \
      > $out 2>&1 || { tail -3 $out >&2; return 1; }
  grep ';' $out | tail -1 | awk -F';' -v bs="$3" -v rw="$2" \
    '{ print (bs == "4k") ? $8 : int(((rw ~ /write/) ? $48 : $7) * 1024 / 1000000) }'
}
# Where the guest's CPU went during a figure (user, system, softirq, idle: shares of their sum) and
# what Soft-RoCE counted meanwhile (retries, RNR, out-of-sequence): a flat figure with idle vCPUs
# is waiting, not work.
cpu_now() { awk '$1=="cpu"{print $2+$3, $4, $8, $5+$6}' /proc/stat; }
rxe_now() {  # per Soft-RoCE link, its error and retry counters; packets dropped on the way
  rdma statistic show 2>/dev/null | awk '{ printf "%s:", $2; for (i = 3; i < NF; i += 2)
    if ($i ~ /err|rnr|seq|retry|dup|defer/ && $(i+1) > 0) printf " %s=%s", $i, $(i+1); printf "; " }'
  local d=0 _ dropped _rest
  while read -r _ dropped _rest; do d=$((d + 0x$dropped)); done < /proc/net/softnet_stat
  printf 'backlog drops=%d; ' $d
  for i in veth0 veth1; do
    printf '%s drops rx %s tx %s; ' $i "$(cat /sys/class/net/$i/statistics/rx_dropped)" \
      "$(cat /sys/class/net/$i/statistics/tx_dropped)"
  done
  awk '/^Udp:/ {if (h) printf "udp rcvbuf errors=%s in errors=%s", $6, $4; h = 1}' /proc/net/snmp
}
diag() {  # label figure before-cpu -> one line in /tmp/diag.txt
  echo "$1 $2 $(echo "$3 $(cpu_now)" | awk '{t=0; for(i=5;i<=8;i++){d[i]=$i-$(i-4); t+=d[i]}; if(t==0)t=1; printf "usr %d%% sys %d%% sirq %d%% idle %d%%", 100*d[5]/t, 100*d[6]/t, 100*d[7]/t, 100*d[8]/t}') rxe: $(rxe_now)" >> /tmp/diag.txt
}
measure() {  # label nqn connect-args...
  local label=$1 nqn=$2; shift 2
  local timeouts
  nvme_connect_find "$nqn" "$@" >/dev/null || { echo "FAIL: connect $label"; return 1; }
  timeouts=$(dmesg | grep -c ' timeout')
  # The last column: I/O timeouts the kernel host logged meanwhile (Soft-RoCE stalls).
  local c f4 f128 w128
  c=$(cpu_now); f4=$(fio_figure "$DEV" randread 4k 32 2); diag "$label" 4k "$c"
  c=$(cpu_now); f128=$(fio_figure "$DEV" read 128k 16 1); diag "$label" 128k "$c"
  c=$(cpu_now); w128=$(fio_figure "$DEV" write 128k 16 1); diag "$label" 128k-write "$c"
  echo "$label $f4 $f128 $w128 $(($(dmesg | grep -c ' timeout') - timeouts))" >> /tmp/ab.txt
  timeout 60 nvme disconnect-all >/dev/null; wait_no_ctrls 30
  tail -1 /tmp/ab.txt
}
fabrikd_measure() {  # label
  local log=/tmp/fabrikd-$1.log pid i
  rm -rf /tmp/ab-data; mkdir -p /tmp/ab-data; : > $log
  # shellcheck disable=SC2086
  /share/bin/fabrikd-$1 --data-dir /tmp/ab-data --listen "rdma:$TRADDR:4420" --drives 1 \
    --drive-size 1G --backend "$BACKEND" --allow-any-host ${FABRIKD_ARGS:-} >> $log 2>&1 &
  pid=$!
  for i in $(seq 1 300); do grep -q 'NVMe/RDMA listener' $log 2>/dev/null && break; sleep 0.1; done
  nqn=$(grep -o 'nqn[^ ]*drive-00' $log | head -1)
  [ -n "$nqn" ] || nqn="nqn.2024-01.io.fabrik:$(hostname):drive-00"
  measure "$1" "$nqn" -t rdma -a "$TRADDR" -s 4420
  kill -TERM $pid; wait $pid || echo "fabrikd-$1 exited with status $?"
}
: > /tmp/ab.txt; : > /tmp/diag.txt
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r"
  for l in $LABELS; do fabrikd_measure "$l"; done
  measure nvmet-rdma "$KNQN" -t rdma -a "$TRADDR" -s 4421
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
k4=$(awk '$1=="nvmet-rdma"{print $2}' /tmp/ab.txt | median)
k128=$(awk '$1=="nvmet-rdma"{print $3}' /tmp/ab.txt | median)
kw128=$(awk '$1=="nvmet-rdma"{print $4}' /tmp/ab.txt | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b > 0) ? a/b : 0}'; }
printf '%-12s %14s %8s %14s %8s %14s %8s\n' target "4K rr IOPS" ratio "128K rd MB/s" ratio \
  "128K wr MB/s" ratio
for l in $LABELS nvmet-rdma; do
  f4=$(awk -v l="$l" '$1==l{print $2}' /tmp/ab.txt | median)
  f128=$(awk -v l="$l" '$1==l{print $3}' /tmp/ab.txt | median)
  w128=$(awk -v l="$l" '$1==l{print $4}' /tmp/ab.txt | median)
  printf '%-12s %14s %8s %14s %8s %14s %8s\n' "$l" "$f4" "$(ratio "$f4" "$k4")" \
    "$f128" "$(ratio "$f128" "$k128")" "$w128" "$(ratio "$w128" "$kw128")"
done
echo "rounds (label, 4K IOPS, 128K read MB/s, 128K write MB/s, I/O timeouts): $(tr '\n' ';' < /tmp/ab.txt)"
echo "guest CPU and Soft-RoCE counters per figure (counters are totals since boot):"; cat /tmp/diag.txt
if [ -d /share/out ]; then dmesg > /share/out/dmesg.txt; cp /tmp/fabrikd-*.log /share/out/; fi
