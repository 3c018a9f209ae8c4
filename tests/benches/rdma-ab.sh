#!/usr/bin/env bash
# fabrikd builds against the kernel's nvmet-rdma over Soft-RoCE, in one boot of the interop
# guest: fio (the kernel host) drives each target in turn, round by round; the medians of the
# rounds and the ratios to nvmet-rdma. TCG makes absolute figures meaningless and noisy (tens of
# percent from run to run), so only targets alternated in the same boot are compared. Never in
# CI (minutes of guest time); the interop suite keeps its one-round figure.
#
#   tests/benches/rdma-ab.sh LABEL=FABRIKD [LABEL=FABRIKD ...]   (default: new=build/release/fabrikd)
#
# ROUNDS=3 SECS=8: rounds, and seconds per fio figure. FABRIKD_ARGS="...": extra fabrikd flags.
# MTU=N: the guest veth pair's MTU (default 1500: a RoCE MTU of 1024). SMP=N: guest vCPUs (2).
# After the table, per figure: where the guest's CPU went, and Soft-RoCE's error counters
# (rcvd_seq_err / duplicate_request / out_of_seq_request growing: go-back-N retransmissions).
# BACKEND=null: fabrikd's drive (null, or ram: data that must be read into the registered buffers).
# Figures: 4K random read at QD32 x 2 jobs (IOPS), 128K sequential read and write at QD16 (MB/s;
# the target moves write data by RDMA READ); fabrikd serves one drive, nvmet-rdma one null_blk
# device.
set -euo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
[ $# -gt 0 ] || set -- "new=$REPO/build/release/fabrikd"
# OUT=dir: where the guest's dmesg and the fabrikd logs go (default: dropped).
share=$(mktemp -d)
trap '[ -n "${OUT:-}" ] && mkdir -p "$OUT" && cp "$share"/out/* "$OUT"/; rm -rf "$share"' EXIT
mkdir -p "$share/bin" "$share/out"
labels=()
for t in "$@"; do
  label=${t%%=*} bin=${t#*=}
  [ -x "$bin" ] || { echo "no fabrikd at $bin"; exit 1; }
  cp "$bin" "$share/bin/fabrikd-$label"
  labels+=("$label")
done
"$REPO/tests/interop/vm.sh" prepare >/dev/null
SHARE_DIR=$share TIMEOUT=${TIMEOUT:-3000} "$REPO/tests/interop/vm.sh" run \
  "$REPO/tests/benches/rdma-ab-guest.sh" "LABELS=${labels[*]}" "ROUNDS=${ROUNDS:-3}" \
  "SECS=${SECS:-8}" "BACKEND=${BACKEND:-null}" "FABRIKD_ARGS=${FABRIKD_ARGS:-}" "MTU=${MTU:-}"
