# tests/interop/nvmf-suite-lib.sh - the kernel NVMe/TCP host interop suite, target-agnostic.
# In the guest as /vmh/nvmf-suite-lib.sh (needs /vmh/lib.sh sourced first).  A driver script
# (fabrikd-tcp.sh, selftest-nvmet.sh) sets the variables and defines the target hooks below,
# then calls nvmf_suite_run; its return value is the number of failed steps.
#
# Variables (driver sets; defaults here):
#   TRTYPE=tcp TRADDR=127.0.0.1 TRSVCID=4420
#   NQN_PREFIX      drive subsystem NQN prefix; drive i is $(printf "%s%02d" $NQN_PREFIX i)
#   NDRIVES=24      number of drive subsystems the target serves
#   DRIVE_BYTES     expected namespace size in bytes
#   FIO_DEVS=4 FIO_MIB=32   fio: namespaces used at once, MiB written+verified per device per run
#   PERSIST_DRIVE=5 drive index used for the persistence test
#   DIGEST_DRIVE=7  drive index connected with header and data digests
#   RESTART_DRIVE=9 drive index under fio while the target restarts
#   CTRL_LOSS_TMO=15 bounds how long a dead target can block I/O (kernel default is 600 s)
#   SKIP="fio persist ..."  step keys to skip (start discover connect identify fio persist
#                   disconnect digest restart acl stop)
# Hooks (driver defines):
#   target_start [ALLOWED_HOSTNQN]   start serving (no arg: any host); return non-zero on failure
#   target_stop                      stop; non-zero if it did not shut down cleanly (fabrikd: below)
#   target_log                       print the target's log (for failures), may be empty  (fabrikd: below)
#   suite_extra_steps                (optional) more steps, run after the others
#   suite_after_fio                  (optional) more steps, run right after the fio step
TRTYPE=${TRTYPE:-tcp}
TRADDR=${TRADDR:-127.0.0.1}
TRSVCID=${TRSVCID:-4420}
NDRIVES=${NDRIVES:-24}
FIO_DEVS=${FIO_DEVS:-4}
FIO_MIB=${FIO_MIB:-32}
PERSIST_DRIVE=${PERSIST_DRIVE:-5}
DIGEST_DRIVE=${DIGEST_DRIVE:-7}
RESTART_DRIVE=${RESTART_DRIVE:-9}
CTRL_LOSS_TMO=${CTRL_LOSS_TMO:-15}
SKIP=${SKIP:-}
FAB=(-t "$TRTYPE" -a "$TRADDR" -s "$TRSVCID")
CONN_OPTS=(--ctrl-loss-tmo="$CTRL_LOSS_TMO")

# target_stop and target_log for fabrikd run in the background as $FPID, logging to $LOGF
# (fabrikd-tcp.sh, fabrikd-rdma.sh); a driver with another target defines its own after
# sourcing this file.
target_stop() {  # SIGTERM, must exit 0 within 30 s
  local i rc
  [ -n "$FPID" ] || { echo "  fabrikd not running"; return 1; }
  kill -TERM $FPID
  for i in $(seq 1 300); do kill -0 $FPID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $FPID 2>/dev/null; then
    echo "  fabrikd pid $FPID still running 30 s after SIGTERM: SIGKILL"
    kill -KILL $FPID; wait $FPID 2>/dev/null; FPID=; return 1
  fi
  wait $FPID; rc=$?; FPID=
  echo "  fabrikd exited with status $rc after SIGTERM (${i}00 ms)"
  [ $rc = 0 ]
}
target_log() {
  echo "---- fabrikd log (last 60 lines of $LOGF)"; tail -n 60 $LOGF | sed 's/^/  fabrikd: /'; echo "----"
  [ -n "$FPID" ] && ! kill -0 $FPID 2>/dev/null && echo "  NOTE: fabrikd (pid $FPID) is no longer running"
  return 0
}
# After a failed run: the log's tail, then the panic (if any) and `$1` (extra lines, e.g. the
# kernel host's complaints) last, where a CI log that keeps only its tail still shows them.
failure_tail() {
  echo; echo "fabrikd log (last 40 lines):"; tail -n 40 $LOGF | sed 's/^/  fabrikd: /'
  if grep -q panicked $LOGF; then
    echo "fabrikd panicked:"; grep -B2 -A8 panicked $LOGF | head -40 | sed 's/^/  fabrikd: /'
  fi
  [ -z "${1:-}" ] || printf '%s\n' "$1" | sed 's/^/  /'
}

drive_nqn() { printf '%s%02d' "$NQN_PREFIX" "$1"; }
host_nqn() { cat /etc/nvme/hostnqn; }
skipped() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------- steps
# A step that needs a host with no controllers starts from one, whatever an earlier (failed)
# step left behind: one failure must not fail the steps after it.
no_ctrls_left() {
  [ "$(ctrl_count)" = 0 ] && return 0
  echo "  controllers left by an earlier step: $(ls /sys/class/nvme | tr '\n' ' ')- disconnecting"
  timeout 60 nvme disconnect-all
  assert "no controllers left" wait_no_ctrls 30
}
s_start() {
  assert "target starts and listens on $TRADDR:$TRSVCID" target_start || return 1
}
s_discover() {
  local nqns n i missing=0 total
  nqns=$(disc_nqns "${FAB[@]}"); local rc=$?
  sed 's/^/  | /' /tmp/discover.out | grep -E 'Discovery Log Number|subtype|subnqn' | head -8
  echo "  | ..."
  assert "nvme discover exits 0" [ $rc = 0 ] || { cat /tmp/discover.out; return 1; }
  total=$(sed -n 's/.*Number of Records \([0-9]*\).*/\1/p' /tmp/discover.out)
  n=$(grep -c "^$NQN_PREFIX" <<<"$nqns")
  echo "  discovery log: ${total:-?} records, $n drive subsystems"
  assert "discovery log lists $NDRIVES drive subsystems (got $n)" [ "$n" = "$NDRIVES" ] || return 1
  for ((i = 0; i < NDRIVES; i++)); do
    grep -qxF "$(drive_nqn $i)" <<<"$nqns" || { echo "  missing from discovery log: $(drive_nqn $i)"; missing=1; }
  done
  assert "every drive NQN is in the discovery log" [ $missing = 0 ] || return 1
  assert "no duplicate drive entries" [ "$(grep "^$NQN_PREFIX" <<<"$nqns" | sort -u | wc -l)" = "$NDRIVES" ]
}
s_connect() {
  local i d sz bad=0 nl
  x timeout 120 nvme connect-all "${FAB[@]}" "${CONN_OPTS[@]}"
  assert "nvme connect-all exits 0" [ $? = 0 ] || return 1
  assert "$NDRIVES namespaces appear" wait_ns_count "$NQN_PREFIX" "$NDRIVES" 120 || return 1
  nl=$(timeout 60 nvme list 2>&1); echo "$nl" | head -4 | sed 's/^/  | /'; echo "  | ..."
  assert "nvme list shows $NDRIVES namespaces" [ "$(grep -cE '^/dev/nvme[0-9]+n[0-9]+' <<<"$nl")" = "$NDRIVES" ] || return 1
  for ((i = 0; i < NDRIVES; i++)); do
    d=$(ns_dev "$(drive_nqn $i)") || { echo "  no namespace for $(drive_nqn $i)"; bad=1; continue; }
    sz=$(blk_bytes "$d")
    [ "$sz" = "$DRIVE_BYTES" ] || { echo "  $d ($(drive_nqn $i)): size $sz, expected $DRIVE_BYTES"; bad=1; }
  done
  assert "every namespace exists and is $DRIVE_BYTES bytes" [ $bad = 0 ]
}
kv() { sed -n "s/^$1 *: *//p" | head -1 | sed 's/ *$//'; }   # nvme-cli "key : value" parser
s_identify() {
  local i nqn c d out mn sn subnqn cntlid nsze flbas lbads st bad=0 list
  for i in 0 $((NDRIVES / 2)) $((NDRIVES - 1)); do
    nqn=$(drive_nqn $i)
    c=$(ctrl_dev "$nqn") || { echo "  no live controller for $nqn"; bad=1; continue; }
    d=$(ns_dev "$nqn") || { echo "  no namespace for $nqn"; bad=1; continue; }
    out=$(timeout 30 nvme id-ctrl "$c" 2>&1) || { echo "  nvme id-ctrl $c failed: $out"; bad=1; continue; }
    mn=$(kv mn <<<"$out"); sn=$(kv sn <<<"$out"); subnqn=$(kv subnqn <<<"$out"); cntlid=$(kv cntlid <<<"$out")
    echo "  $c: mn='$mn' sn='$sn' cntlid=$cntlid fr='$(kv fr <<<"$out")' mdts=$(kv mdts <<<"$out") subnqn=$subnqn"
    [ -n "$mn" ] || { echo "  $c: empty model number"; bad=1; }
    [ -n "$sn" ] || { echo "  $c: empty serial number"; bad=1; }
    [ "$subnqn" = "$nqn" ] || { echo "  $c: subnqn '$subnqn' != '$nqn'"; bad=1; }
    [ -n "$cntlid" ] && [ "$((cntlid))" -ge 1 ] && [ "$((cntlid))" -le 65519 ] ||   # 0xffef max
      { echo "  $c: bad cntlid '$cntlid'"; bad=1; }
    [ "$(cat "/sys/class/nvme/$(basename "$c")/cntlid" 2>/dev/null)" = "$((cntlid))" ] ||
      { echo "  $c: sysfs cntlid $(cat "/sys/class/nvme/$(basename "$c")/cntlid") != id-ctrl $cntlid"; bad=1; }
    out=$(timeout 30 nvme id-ns "$d" 2>&1) || { echo "  nvme id-ns $d failed: $out"; bad=1; continue; }
    nsze=$(kv nsze <<<"$out"); flbas=$(kv flbas <<<"$out")
    lbads=$(grep -E '^lbaf +[0-9]+ *:.*in use' <<<"$out" | sed -n 's/.*lbads:\([0-9]*\).*/\1/p' | head -1)
    echo "  $d: nsze=$nsze ncap=$(kv ncap <<<"$out") nuse=$(kv nuse <<<"$out") flbas=$flbas lbads=$lbads nlbaf=$(kv nlbaf <<<"$out")"
    [ -n "$lbads" ] || { echo "  $d: no LBA format marked in use"; grep lbaf <<<"$out"; bad=1; continue; }
    [ "$(( nsze * (1 << lbads) ))" = "$DRIVE_BYTES" ] ||
      { echo "  $d: nsze*2^lbads = $(( nsze * (1 << lbads) )) != $DRIVE_BYTES"; bad=1; }
    # ANA: the kernel read the ANA log at connect and put the path in its group's state.
    st=$(cat /sys/class/nvme/"$(basename "$c")"/nvme*c*n*/ana_state 2>/dev/null | sort -u | tr '\n' ' ')
    [ "$st" = "optimized " ] || { echo "  $c: path ana_state '$st', expected optimized"; bad=1; }
    out=$(timeout 30 nvme ana-log "$c" 2>&1) || { echo "  nvme ana-log $c failed: $out"; bad=1; continue; }
    echo "  $c ana-log: $(tr -s ' \t' ' ' <<<"$out" | tr '\n' ';' | cut -c1-160)"
    grep -qE 'state[[:space:]]*:[[:space:]]*optimized' <<<"$out" ||
      { echo "  $c: nvme ana-log shows no optimized group"; bad=1; }
    out=$(timeout 30 nvme smart-log "$c" 2>&1) || { echo "  nvme smart-log $c failed: $out"; bad=1; continue; }
    echo "  $c smart-log: $(grep -E '^(critical_warning|temperature|available_spare)[[:space:]]' <<<"$out" | tr -s ' ' | tr '\n' ';')"
  done
  list=$(timeout 30 nvme list-subsys 2>&1)
  echo "$list" | head -6 | sed 's/^/  | /'
  local paths; paths=$(grep -cE "$TRTYPE traddr=$TRADDR,? ?trsvcid=$TRSVCID" <<<"$list")
  echo "  nvme list-subsys: $paths $TRTYPE paths"
  assert "nvme list-subsys shows $NDRIVES $TRTYPE paths to $TRADDR:$TRSVCID" [ "$paths" -ge "$NDRIVES" ] || bad=1
  assert "id-ctrl / id-ns / ANA / smart-log sane" [ $bad = 0 ]
}
s_fio() {
  local devs=() i d
  for ((i = 0; i < FIO_DEVS && i < NDRIVES; i++)); do
    d=$(ns_dev "$(drive_nqn $i)") || { echo "  no namespace for $(drive_nqn $i)"; return 1; }
    devs+=("$d")
  done
  fio_verify rw4k-qd32 4k 4 32 "$FIO_MIB" "${devs[@]}" || return 1
  fio_verify rw128k-qd16 128k 2 16 "$FIO_MIB" "${devs[@]}" || return 1
  fio_verify rw4k-qd1 4k 2 1 $(( FIO_MIB / 4 > 2 ? FIO_MIB / 4 : 2 )) "${devs[@]}" || return 1
}
PAT_OFFS=()
s_persist() {
  local nqn d i bs=65536 blocks rc
  nqn=$(drive_nqn "$PERSIST_DRIVE")
  d=$(ns_dev "$nqn") || { echo "  no namespace for $nqn"; return 1; }
  blocks=$(( DRIVE_BYTES / bs ))
  PAT_OFFS=(0 17 $(( blocks / 2 + 3 )) $(( blocks - 1 )))   # in 64 KiB units
  for i in "${!PAT_OFFS[@]}"; do
    # a recognisable, offset-specific pattern: header text + random bytes
    { printf 'FABRIK-PERSIST block %d of %s\n' "${PAT_OFFS[$i]}" "$nqn"; head -c $bs /dev/urandom; } |
      head -c $bs > /tmp/pat.$i
    dd if=/tmp/pat.$i of="$d" bs=$bs seek="${PAT_OFFS[$i]}" count=1 oflag=direct conv=notrunc 2>/dev/null ||
      { echo "  dd write to $d block ${PAT_OFFS[$i]} failed"; return 1; }
  done
  echo "  wrote ${#PAT_OFFS[@]} x 64 KiB patterns to $d ($nqn) at 64KiB-blocks ${PAT_OFFS[*]}"
  # read back once before the restart (catches plain write/read bugs separately)
  for i in "${!PAT_OFFS[@]}"; do
    dd if="$d" of=/tmp/rb bs=$bs skip="${PAT_OFFS[$i]}" count=1 iflag=direct 2>/dev/null
    assert "pattern $i reads back before restart" cmp -s /tmp/pat.$i /tmp/rb || return 1
  done
  x timeout 60 nvme disconnect-all
  assert "controllers gone after disconnect-all" wait_no_ctrls 30 || return 1
  assert "target stops cleanly (SIGTERM)" target_stop || return 1
  assert "target restarts on the same data" target_start || return 1
  nvme_connect_find "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "reconnect to $nqn" [ $rc = 0 ] || return 1
  for i in "${!PAT_OFFS[@]}"; do
    dd if="$DEV" of=/tmp/rb bs=$bs skip="${PAT_OFFS[$i]}" count=1 iflag=direct 2>/dev/null
    if ! cmp -s /tmp/pat.$i /tmp/rb; then
      echo "  expected:"; head -c 64 /tmp/pat.$i | od -c | head -3
      echo "  got:";      head -c 64 /tmp/rb | od -c | head -3
      assert "pattern at 64KiB-block ${PAT_OFFS[$i]} survives restart" false; return 1
    fi
  done
  echo "  all ${#PAT_OFFS[@]} patterns read back after restart"
}
s_disconnect() {
  local n
  # reconnect everything first (the persistence step left one controller)
  x timeout 120 nvme connect-all "${FAB[@]}" "${CONN_OPTS[@]}" > /dev/null
  wait_ns_count "$NQN_PREFIX" "$NDRIVES" 120
  x timeout 60 nvme disconnect-all
  assert "nvme disconnect-all exits 0" [ $? = 0 ] || return 1
  assert "no controllers left in /sys/class/nvme" wait_no_ctrls 30 || return 1
  n=$(ls /dev | grep -cE '^nvme[0-9]+(n[0-9]+)?$')
  assert "no /dev/nvme* nodes left (found $n)" [ "$n" = 0 ]
}
s_digest() {
  local nqn rc z
  nqn=$(drive_nqn "$DIGEST_DRIVE")
  nvme_connect_find "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}" --hdr-digest --data-digest; rc=$?
  assert "connect $nqn with header and data digests" [ $rc = 0 ] || return 1
  echo "  $(basename "$CTRL"): $(cat /sys/class/nvme/"$(basename "$CTRL")"/address 2>/dev/null)"
  fio_verify digest-4k 4k 2 16 8 "$DEV" || return 1
  fio_verify digest-128k 128k 1 8 8 "$DEV" || return 1
  # Write Zeroes and Dataset Management (deallocate) from nvme-cli: the ranges read back as zeros.
  dd if=/dev/urandom of=/tmp/rnd bs=4096 count=64 2>/dev/null
  dd if=/tmp/rnd of="$DEV" bs=4096 count=64 oflag=direct 2>/dev/null || { echo "  dd to $DEV failed"; return 1; }
  head -c $(( 32 * 4096 )) /dev/zero > /tmp/zero32
  x timeout 30 nvme write-zeroes "$DEV" --start-block=0 --block-count=31
  assert "nvme write-zeroes succeeds" [ $? = 0 ] || return 1
  x timeout 30 nvme dsm "$DEV" --ad --slbs=32 --blocks=32
  assert "nvme dsm --ad succeeds" [ $? = 0 ] || return 1
  dd if="$DEV" of=/tmp/z bs=4096 count=32 iflag=direct 2>/dev/null
  assert "write-zeroes range reads zeros" cmp -s /tmp/z /tmp/zero32 || return 1
  dd if="$DEV" of=/tmp/z bs=4096 skip=32 count=32 iflag=direct 2>/dev/null
  assert "deallocated range reads zeros" cmp -s /tmp/z /tmp/zero32 || return 1
  x timeout 30 nvme flush "$DEV"
  assert "nvme flush succeeds" [ $? = 0 ] || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30
}
# fio verify keeps running while the target restarts: the kernel host reconnects and retries
# what was not acknowledged; nothing acknowledged may be lost.
s_restart() {
  local nqn rc fpid out=/tmp/fio-restart.out
  no_ctrls_left || return 1
  nqn=$(drive_nqn "$RESTART_DRIVE")
  nvme_connect_find "$nqn" "${FAB[@]}" --ctrl-loss-tmo=60 --reconnect-delay=1; rc=$?
  assert "connect $nqn" [ $rc = 0 ] || return 1
  fio --name=restart --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
      --iodepth=16 --size=48m --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=0 \
      > "$out" 2>&1 &
  fpid=$!
  sleep 3
  assert "target stops under I/O" target_stop || { kill $fpid; return 1; }
  sleep 1
  assert "target restarts" target_start || { kill $fpid; return 1; }
  local i
  for i in $(seq 1 3000); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
  kill -0 $fpid 2>/dev/null && { echo "  fio still running after 300 s"; kill -9 $fpid; }
  wait $fpid; rc=$?
  grep -E '^ +(write|read):' "$out" | sed 's/^ */  [restart] /'
  dmesg | grep -E 'nvme.*(reconnect|Reconnect|Successfully)' | tail -3 | sed 's/^/  dmesg: /'
  if [ $rc != 0 ] || grep -qiE 'verify:|bad magic|err= *[1-9]' "$out"; then
    echo "  fio exit $rc:"; grep -iE 'verify|err=|error' "$out" | head -12 | sed 's/^/  fio: /'
    # What the kernel host went through, to tell a lost path from a failed command.
    dmesg | grep -iE 'nvme|blk_update|I/O error' | tail -30 | sed 's/^/  dmesg: /'
    assert "fio verify across a target restart" false
    no_ctrls_left; return 1
  fi
  grep -qE '^ +read:' "$out" || { assert "fio verify phase ran" false; return 1; }
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30
}
s_acl() {
  local u allowed me n rc
  no_ctrls_left || return 1
  me=$(host_nqn)
  u=$(cat /proc/sys/kernel/random/uuid)
  allowed=nqn.2014-08.org.nvmexpress:uuid:$u
  echo "  own hostnqn $me; allowed only: $allowed"
  assert "target stops" target_stop || return 1
  assert "target starts allowing only $allowed" target_start "$allowed" || return 1
  x timeout 60 nvme connect -n "$(drive_nqn 0)" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "connect with a non-allowed hostnqn is refused" [ $rc != 0 ] || { nvme disconnect-all; return 1; }
  assert "no controller left after refused connect" [ "$(ctrl_count)" = 0 ] || return 1
  n=$(disc_nqns "${FAB[@]}" | grep -c "^$NQN_PREFIX")
  echo "  discover as $me: $n drive entries (rc of discover irrelevant)"
  assert "discovery log for a non-allowed host has 0 drive entries" [ "$n" = 0 ] || return 1
  n=$(disc_nqns "${FAB[@]}" --hostnqn="$allowed" --hostid="$u" | grep -c "^$NQN_PREFIX")
  echo "  discover as $allowed: $n drive entries"
  assert "discovery log for the allowed host lists $NDRIVES drives" [ "$n" = "$NDRIVES" ] || return 1
  nvme_connect_find "$(drive_nqn 0)" "${FAB[@]}" "${CONN_OPTS[@]}" --hostnqn="$allowed" --hostid="$u"; rc=$?
  assert "connect with the allowed hostnqn succeeds" [ $rc = 0 ] || return 1
  assert "I/O works for the allowed host" dd if="$DEV" of=/dev/null bs=4096 count=16 iflag=direct 2>/dev/null || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30
}
s_stop() {
  no_ctrls_left
  assert "target stops cleanly at the end" target_stop
}

nvmf_suite_run() {
  modprobe nvme-fabrics && modprobe "nvme-$TRTYPE" || { echo "cannot load nvme-$TRTYPE"; return 1; }
  echo "suite: $TRTYPE $TRADDR:$TRSVCID, $NDRIVES drives of $DRIVE_BYTES bytes, prefix $NQN_PREFIX, hostnqn $(host_nqn)"
  ON_FAIL=target_log
  skipped start      || step "start target" s_start
  skipped discover   || step "nvme discover lists $NDRIVES drives" s_discover
  skipped connect    || step "nvme connect-all: $NDRIVES namespaces of the right size" s_connect
  skipped identify   || step "id-ctrl / id-ns / smart-log / list-subsys" s_identify
  skipped fio        || step "fio randwrite + crc32c verify on $FIO_DEVS namespaces" s_fio
  if declare -F suite_after_fio >/dev/null; then suite_after_fio; fi
  skipped persist    || step "data persists across disconnect + target restart" s_persist
  skipped disconnect || step "nvme disconnect-all is clean" s_disconnect
  skipped digest     || step "digests, write-zeroes, dsm deallocate, flush" s_digest
  skipped restart    || step "fio verify across a target restart (host reconnects)" s_restart
  skipped acl        || step "access control (--host)" s_acl
  skipped stop       || step "stop target" s_stop
  if declare -F suite_extra_steps >/dev/null; then suite_extra_steps; fi
  ON_FAIL=
  t_summary
}
