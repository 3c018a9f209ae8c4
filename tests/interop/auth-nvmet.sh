#!/bin/bash
# auth-nvmet.sh - guest script: NVMe in-band authentication (DH-HMAC-CHAP) between the Linux
# host (nvme-tcp, nvme-cli 2.3 / libnvme 1.3) and the Linux kernel target (nvmet-tcp, configfs
# hosts/<hostnqn>/dhchap_*) on 127.0.0.1:4420, null_blk namespace.  It documents what Linux 6.12
# does on both ends; the cases are in auth-lib.sh, shared with auth-fabrikd.sh (the same cases
# against fabrikd): this file gives the target_* hooks.  Needs the 6.12 kernel (6.1 Debian has
# no NVMe auth):
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
SUBNQN=nqn.2024-01.io.fabrik:auth-target

# ------------------------------------------------------------------ the target (kernel nvmet)
# The host entry is made afresh by each target_host_keys, so a key left empty stays unset.
T_HOST=$CFG/hosts/$HOSTNQN
target_start() {
  modprobe nvmet && modprobe nvmet-tcp && modprobe nvme-tcp && modprobe nvme-auth || return 1
  modprobe null_blk nr_devices=1 gb=1 memory_backed=1 || return 1
  local i; for i in $(seq 1 50); do [ -b /dev/nullb0 ] && break; sleep 0.1; done
  nvmet_port 1 tcp $TRADDR $TRSVCID || return 1
  nvmet_subsys $SUBNQN /dev/nullb0 "$HOSTNQN" && nvmet_link $SUBNQN 1 || return 1
  wait_port $TRADDR $TRSVCID 30 || return 1
  echo "  nvmet: $SUBNQN (null_blk /dev/nullb0) on tcp $TRADDR:$TRSVCID, allowed host $HOSTNQN"
}
target_host_keys() {  # hostkey ctrlkey hash dhgroup
  local link=$CFG/subsystems/$SUBNQN/allowed_hosts/$HOSTNQN
  rm -f "$link"; [ -d "$T_HOST" ] && rmdir "$T_HOST"
  mkdir "$T_HOST" || return 1
  [ -n "$1" ] && { echo "$1" > "$T_HOST/dhchap_key" || return 1; }
  [ -n "$2" ] && { echo "$2" > "$T_HOST/dhchap_ctrl_key" || return 1; }
  [ -n "$3" ] && { echo "$3" > "$T_HOST/dhchap_hash" || return 1; }
  [ -n "$4" ] && { echo "$4" > "$T_HOST/dhchap_dhgroup" || return 1; }
  ln -s "$T_HOST" "$link" || return 1
  echo "  nvmet hosts/<hostnqn>: dhchap_key='$(cat "$T_HOST/dhchap_key")' dhchap_ctrl_key='$(cat "$T_HOST/dhchap_ctrl_key")'"
  echo "                         dhchap_hash=$(cat "$T_HOST/dhchap_hash") dhchap_dhgroup=$(cat "$T_HOST/dhchap_dhgroup")"
}
target_rotate_key() { echo "$1" > "$T_HOST/dhchap_key"; }   # the host entry stays linked
target_stop() { nvmet_clear; }
target_mark() { :; }                                         # case_begin's dmesg -c is the mark
target_says_auth() { dmesg_has "with DH-HMAC-CHAP"; }        # "creating nvm controller ... with DH-HMAC-CHAP."
target_says_noauth() { ! dmesg_has "with DH-HMAC-CHAP"; }
target_auth_qids() {  # debug messages (dbg_on): "nvmet_auth_reply: ctrl N qid Q host authenticated"
  dmesg | sed -n 's/.*nvmet_auth_reply: ctrl [0-9]* qid \([0-9]*\) host authenticated.*/\1/p' | sort -un
}
target_ctrl_kept() { ! dmesg | grep -qE "nvmet: ctrl [0-9]+ fatal error|creating nvm controller"; }
target_no_ctrls() { :; }
target_msgs() { :; }                                         # nvmet's messages are in the dmesg

# ------------------------------------------------------------------ main
echo "auth-nvmet: kernel $(uname -r)"
auth_need_612
step "target: nvmet-tcp $SUBNQN on $TRADDR:$TRSVCID" target_start || true
[ "$T_FAILED" = 0 ] || { t_summary; exit 1; }
auth_steps
target_stop
t_summary
