#!/bin/bash
# auth-nvmet.sh - guest script: NVMe in-band authentication (DH-HMAC-CHAP) between the Linux
# host (nvme-tcp, nvme-cli 2.3 / libnvme 1.3) and the Linux kernel target (nvmet-tcp, configfs
# hosts/<hostnqn>/dhchap_*) on 127.0.0.1:4420, null_blk namespace.  It documents what Linux 6.12
# does on both ends; the cases are in auth-lib.sh, shared with auth-fabrikd.sh (the same cases
# against fabrikd), the target_* hooks in auth-nvmet-lib.sh (shared with auth-fabrik-host.sh).
# Needs the 6.12 kernel (6.1 Debian has no NVMe auth):
#   KPKG=linux-image-6.12.100+deb12-amd64 FABRIK_INTEROP_CACHE=~/.cache/fabrik-interop-612 \
#     tests/interop/vm.sh run tests/interop/auth-nvmet.sh [SKIP="matrix ..."]
# Steps (SKIP keys): keys, unidir, bidir, flow, wrong-host-key, wrong-ctrl-key, no-host-key,
#   no-target-key, matrix, reauth.  Every check prints a PASS/FAIL line; exit status = failed steps.
set -u
. /vmh/lib.sh
args_to_env "$@"
. /vmh/auth-lib.sh
T_SUITE="DH-HMAC-CHAP: kernel nvme-tcp host vs kernel nvmet-tcp"
TRADDR=127.0.0.1 TRSVCID=4420
. /vmh/auth-nvmet-lib.sh     # the target_* hooks: nvmet, SUBNQN nqn.2024-01.io.fabrik:auth-target

# ------------------------------------------------------------------ main
echo "auth-nvmet: kernel $(uname -r)"
auth_need_612
step "target: nvmet-tcp $SUBNQN on $TRADDR:$TRSVCID" target_start || true
[ "$T_FAILED" = 0 ] || { t_summary; exit 1; }
auth_steps
target_stop
t_summary
