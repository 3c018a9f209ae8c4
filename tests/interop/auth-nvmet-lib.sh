# tests/interop/auth-nvmet-lib.sh - the kernel target (nvmet-tcp on null_blk, configfs
# hosts/<hostnqn>/dhchap_*) behind the target_* hooks of auth-lib.sh (in the guest as
# /vmh/auth-nvmet-lib.sh).  Sourced after /vmh/lib.sh and /vmh/auth-lib.sh by auth-nvmet.sh
# (the kernel host against it) and auth-fabrik-host.sh (fabrik's userspace host against it).
# Sourcing it (re)defines every target_* hook; TRADDR TRSVCID SUBNQN default to
# 127.0.0.1 4420 nqn.2024-01.io.fabrik:auth-target (SUBNQN is set afresh: another target's
# hooks may have left theirs).
#   nvmet_queue_socks   nvmet's connections on TRSVCID that are still open (/proc/net/tcp)
#   nvmet_dbg_is_on     nvmet's debug messages are on (dbg_on of auth-lib.sh)
#   nvmet_cntlids       the controllers nvmet created since the mark (dmesg), one a line
TRADDR=${TRADDR:-127.0.0.1} TRSVCID=${TRSVCID:-4420}
SUBNQN=nqn.2024-01.io.fabrik:auth-target
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
nvmet_queue_socks() {  # /proc/net/tcp lines of TRSVCID's side neither listening nor closed
  # (st 0A LISTEN, 06 TIME_WAIT, 07 CLOSE): nvmet's queues that it has not released
  local port; port=$(printf '%04X' "$TRSVCID")
  awk -v p=":$port" 'NR > 1 && substr($2, length($2) - 4) == p && $4 != "0A" && $4 != "06" && $4 != "07"' \
    /proc/net/tcp
}
nvmet_dbg_is_on() { [ -r $DDBG ] && grep -qE '\[nvmet\]nvmet_stop_keep_alive_timer =p' $DDBG; }
nvmet_cntlids() { dmesg | sed -n 's/.*nvmet: creating nvm controller \([0-9]*\) .*/\1/p' | sort -un; }
target_no_ctrls() {  # nvmet's own view (no debugfs in Debian's 6.12): its queue connections are
  # closed, and with its debug messages on, each controller created since the mark was freed
  # (nvmet_ctrl_free -> "ctrl N stop keep-alive"; a host's keep-alive timeout is never 0 here)
  local i left c
  for i in $(seq 1 50); do left=$(nvmet_queue_socks); [ -z "$left" ] && break; sleep 0.2; done
  [ -n "$left" ] && echo "  nvmet's connections on port $TRSVCID still open (/proc/net/tcp):" && sed 's/^/    /' <<<"$left"
  check "nvmet: no queue connection left on port $TRSVCID (/proc/net/tcp)" [ -z "$left" ]
  nvmet_dbg_is_on || return 0
  for c in $(nvmet_cntlids); do
    for i in $(seq 1 50); do dmesg_has "ctrl $c stop keep-alive" && break; sleep 0.2; done
    check "nvmet: controller $c freed (debug: 'ctrl $c stop keep-alive')" dmesg_has "ctrl $c stop keep-alive"
  done
}
target_msgs() { :; }                                         # nvmet's messages are in the dmesg
