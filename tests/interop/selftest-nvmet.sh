#!/bin/bash
# selftest-nvmet.sh - guest script: the harness self-test.  Runs the same interop suite as
# fabrikd-tcp.sh (nvmf-suite-lib.sh) against the Linux kernel target (nvmet-tcp over
# null_blk memory_backed=1 devices), proving the guest tooling and the suite's own checks.
#   vm.sh run selftest-nvmet.sh [NDRIVES=24] [FIO_MIB=32] [SKIP="fio ..."]
set -u
. /vmh/lib.sh
args_to_env "$@"
. /vmh/nvmf-suite-lib.sh
T_SUITE="selftest: kernel nvmet-tcp"
NQN_PREFIX=${NQN_PREFIX:-nqn.2024-01.io.fabrik:$(hostname):drive-}
DRIVE_BYTES=$((1024 * 1024 * 1024))
PORT=1

modprobe null_blk nr_devices="$NDRIVES" gb=1 memory_backed=1 || { echo "FAIL: null_blk"; exit 1; }
target_start() {  # [allowed hostnqn]
  local i h=${1:-any}
  nvmet_port $PORT "$TRTYPE" "$TRADDR" "$TRSVCID" || return 1
  for ((i = 0; i < NDRIVES; i++)); do
    nvmet_subsys "$(drive_nqn $i)" /dev/nullb$i "$h" && nvmet_link "$(drive_nqn $i)" $PORT || return 1
  done
  echo "  nvmet: $NDRIVES subsystems on $TRTYPE $TRADDR:$TRSVCID (hosts: $h)"
  wait_port "$TRADDR" "$TRSVCID" 30
}
target_stop() { nvmet_clear; }
target_log() { :; }

nvmf_suite_run
