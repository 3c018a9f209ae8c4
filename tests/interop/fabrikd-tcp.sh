#!/bin/bash
# fabrikd-tcp.sh - guest script: the Linux kernel NVMe/TCP host (nvme-tcp, nvme-cli, fio)
# against fabrikd listening on 127.0.0.1:4420 inside the guest (nvmf-suite-lib.sh).
#   FABRIKD=build/release/fabrikd tests/interop/vm.sh ... (see tests/run); in the guest
#   fabrikd comes from $FABRIKD, /share/bin or /extra/bin (PATH).
# Args (VAR=value): NDRIVES=24 DRIVE_SIZE=1G BACKEND=file FIO_DEVS=4 FIO_MIB=32
#   DATA_FS=ext4|tmpfs SKIP="fio acl ..." RUST_LOG=info FABRIKD=/path NQN_PREFIX=...
#   FABRIKD_ARGS="extra args"
# Artifacts: when /share is mounted, /share/out/ gets fabrikd.log, dmesg.txt.
set -u
. /vmh/lib.sh
args_to_env "$@"
. /vmh/nvmf-suite-lib.sh
T_SUITE="kernel nvme-tcp host vs fabrikd"
DRIVE_SIZE=${DRIVE_SIZE:-1G}
DRIVE_BYTES=$(to_bytes "$DRIVE_SIZE")
BACKEND=${BACKEND:-file}
DATA=/data/fabrik
LOGF=/tmp/fabrikd.log
NQN_PREFIX=${NQN_PREFIX:-nqn.2024-01.io.fabrik:$(hostname):drive-}
export RUST_LOG=${RUST_LOG:-info} RUST_BACKTRACE=1 NO_COLOR=1
FABRIKD=${FABRIKD:-$(command -v fabrikd)}
[ -n "$FABRIKD" ] && [ -x "$FABRIKD" ] || { echo "FAIL: no fabrikd binary in the guest (PATH=$PATH)"; echo "0 passed, 1 failed"; exit 1; }
OUT=; if grep -q ' /share 9p ' /proc/mounts; then OUT=/share/out; mkdir -p $OUT; fi

data_dir_setup /data || { echo "FAIL: data dir setup"; exit 1; }
mkdir -p $DATA
FPID=
START_N=0
target_start() {  # [allowed hostnqn]
  local hostargs=() i
  [ -n "${1:-}" ] && hostargs=(--host "$1")
  START_N=$((START_N + 1))
  echo "===== fabrikd start #$START_N $(date +%T) =====" >> $LOGF
  local cmd=("$FABRIKD" --data-dir $DATA --listen "$TRADDR:$TRSVCID" --drives "$NDRIVES" --drive-size "$DRIVE_SIZE"
             --backend "$BACKEND" "${hostargs[@]}")
  # shellcheck disable=SC2206
  cmd+=(${FABRIKD_ARGS:-})
  echo "+ ${cmd[*]} >> $LOGF 2>&1 &"
  "${cmd[@]}" >> $LOGF 2>&1 &
  FPID=$!
  for i in $(seq 1 600); do   # 60 s: first start creates the drive files
    (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null && break
    kill -0 $FPID 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 $FPID 2>/dev/null; then
    wait $FPID; echo "  fabrikd (pid $FPID) exited with status $? before listening"; FPID=; return 1
  fi
  (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null || { echo "  fabrikd pid $FPID not listening on $TRADDR:$TRSVCID after 60 s"; return 1; }
  echo "  fabrikd pid $FPID listening on $TRADDR:$TRSVCID after ${i}00 ms"
}

s_log() {
  local n_err n_warn
  n_err=$(grep -cE '\bERROR\b' $LOGF); n_warn=$(grep -cE '\bWARN\b' $LOGF)
  echo "  fabrikd log: $(wc -l < $LOGF) lines, $n_err ERROR, $n_warn WARN (over $START_N starts)"
  grep -E '\b(ERROR|WARN)\b' $LOGF | head -10 | sed 's/^/  fabrikd: /'
  assert "fabrikd never panicked" [ "$(grep -c 'panicked' $LOGF)" = 0 ] || { grep -A5 panicked $LOGF; return 1; }
}
# The block backend on real kernel block devices (null_blk, memory backed): two drives in one
# subsystem from a config file, fio verify on both namespaces.
s_block() {
  local conf=/tmp/fabrikd-block.toml nqn=nqn.2024-01.io.fabrik:blockbox:nullb s devs=() d i
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  modprobe null_blk nr_devices=2 memory_backed=1 gb=1 bs=4096 || { echo "  cannot load null_blk"; return 1; }
  for i in $(seq 1 50); do [ -b /dev/nullb1 ] && break; sleep 0.1; done
  printf '%s\n' 'box_name = "blockbox"' "listen = [\"$TRADDR:$TRSVCID\"]" \
    '[[drive]]' 'id = "nb0"' 'backend = "block"' 'path = "/dev/nullb0"' \
    '[[drive]]' 'id = "nb1"' 'backend = "block"' 'path = "/dev/nullb1"' \
    '[[subsystem]]' 'name = "nullb"' 'drives = ["nb0", "nb1"]' > $conf
  echo "+ $FABRIKD --config $conf --data-dir $DATA/block"
  echo "===== fabrikd block-backend start $(date +%T) =====" >> $LOGF
  "$FABRIKD" --config $conf --data-dir $DATA/block >> $LOGF 2>&1 &
  FPID=$!
  for i in $(seq 1 100); do (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null && break; sleep 0.1; done
  nvme_connect_find "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}"
  assert "connect $nqn" [ -n "$DEV" ] || return 1
  for i in $(seq 1 50); do
    for s in /sys/class/nvme-subsystem/nvme-subsys*; do
      [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
      mapfile -t devs < <(ls "$s" | grep -E '^nvme[0-9]+n[0-9]+$' | sort -V)
    done
    [ ${#devs[@]} -ge 2 ] && [ -b "/dev/${devs[1]}" ] && break
    sleep 0.1
  done
  assert "two namespaces, one per null_blk device: ${devs[*]}" [ ${#devs[@]} = 2 ] || return 1
  for d in "${devs[@]}"; do
    assert "/dev/$d is 1 GiB" [ "$(blk_bytes /dev/$d)" = $((1 << 30)) ] || return 1
  done
  fio_verify block-4k 4k 2 16 16 "/dev/${devs[0]}" "/dev/${devs[1]}" || return 1
  fio_verify block-128k 128k 1 8 16 "/dev/${devs[0]}" "/dev/${devs[1]}" || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || return 1
  assert "fabrikd stops cleanly" target_stop
}
# A lost write on real media: the drive file sits on ext4 whose device (a loop device over a
# file in a 24 MiB tmpfs) runs out of space under it. The kernel host writes 64 MiB (fabrikd's
# writes land in the page cache), then flushes: the writeback fails, and fdatasync reports it
# once only. No Flush or FUA write succeeds on that drive again, the host sees errors, REST and
# the log say why, until the operator clears the fault.
s_lost_write() {
  local fabrik conf=/tmp/fabrikd-lost.toml data=$DATA/lost mnt=/tmp/lost-fs L rc out i
  local nqn=nqn.2024-01.io.fabrik:lostbox:drive-l0
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  mkdir -p /tmp/lost-backing $mnt
  mount -t tmpfs -o size=24m tmpfs /tmp/lost-backing || return 1
  truncate -s 128M /tmp/lost-backing/disk.img || return 1
  L=$(losetup -f) && losetup "$L" /tmp/lost-backing/disk.img || return 1
  mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$L" || return 1
  mount -o noatime,errors=continue "$L" $mnt || return 1
  echo "  $mnt: ext4 (128 MiB) on $L, over a file in a 24 MiB tmpfs"
  printf '%s\n' 'box_name = "lostbox"' "listen = [\"$TRADDR:$TRSVCID\"]" \
    '[[drive]]' 'id = "l0"' 'backend = "file"' "path = \"$mnt/l0.img\"" 'size = "96M"' > $conf
  echo "===== fabrikd lost-write start $(date +%T) =====" >> $LOGF
  "$FABRIKD" --config $conf --data-dir $data --api off --metrics off >> $LOGF 2>&1 &
  FPID=$!
  for i in $(seq 1 100); do (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null && break; sleep 0.1; done
  nvme_connect_find "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}"
  assert "connect $nqn" [ -n "$DEV" ] || return 1
  x dd if=/dev/urandom of="$DEV" bs=1M count=64 oflag=direct 2>&1 | tail -1
  x timeout 60 nvme flush "$DEV"; rc=$?
  assert "the flush that meets the lost writeback fails" [ $rc != 0 ] || return 1
  x timeout 60 nvme flush "$DEV"; rc=$?
  assert "the next flush fails too (the second fdatasync would have succeeded)" [ $rc != 0 ] || return 1
  head -c 4096 /dev/urandom > /tmp/blk
  x timeout 60 nvme write "$DEV" --start-block=0 --block-count=0 --data-size=4096 --data=/tmp/blk \
    --force-unit-access; rc=$?
  assert "a FUA write fails" [ $rc != 0 ] || return 1
  out=$(x timeout 60 dd if=/tmp/blk of="$DEV" bs=4k count=1 oflag=direct 2>&1); rc=$?
  echo "$out" | sed 's/^/  | /'
  # Linux reports Write Fault as a medium error: ENODATA ("No data available").
  assert "any write from the kernel host fails (a medium or I/O error)" io_failed "$rc" "$out" || return 1
  out=$("$fabrik" drives --api "unix:$data/api.sock" --json)
  echo "$out" | grep -E '"(state|fault)"' | sed 's/^ */  | /'
  assert "REST: drive l0 is read_only, with its fault" grep -q '"state": "read_only"' <<<"$out" || return 1
  assert "fabrikd logged it" grep -q "read-only until an operator clears the fault" $LOGF || return 1
  x "$fabrik" clear-fault l0 --api "unix:$data/api.sock"; rc=$?
  assert "the operator clears the fault" [ $rc = 0 ] || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || return 1
  assert "fabrikd stops" target_stop || return 1
  umount $mnt; losetup -d "$L"; umount /tmp/lost-backing
}
# Composition through the management API (the `fabrik` CLI as client): compose a drive to this
# host, connect with the exact command fabrikd answers, do I/O; a second host NQN can neither see
# nor reach the drive; decomposing takes it away again (the kernel's controller is torn down).
s_compose() {
  local fabrik me other ou nqn out cmd rc n refused
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no management API: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  me=$(host_nqn); ou=$(cat /proc/sys/kernel/random/uuid)
  other=nqn.2014-08.org.nvmexpress:uuid:$ou
  nqn=$(drive_nqn 3)
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  # Free drives admit only $other, so what this host reaches below it owes to the composition.
  assert "target starts allowing only $other" target_start "$other" || return 1
  # fabrik's default: fabrikd's local socket in its data directory, no token.
  export FABRIK_DATA_DIR=$DATA; unset FABRIK_API
  out=$(x "$fabrik" compose --host "$me" --drives 3 2>&1); rc=$?
  echo "$out" | sed 's/^/  | /'
  assert "fabrik compose succeeds" [ $rc = 0 ] || return 1
  cmd=$(grep -m1 '^  nvme connect ' <<<"$out" | sed 's/^ *//')
  assert "compose answers the nvme connect command for $nqn" grep -qF -- "-n $nqn --hostnqn $me" <<<"$cmd" || return 1
  n=$(disc_nqns "${FAB[@]}" --hostnqn="$other" --hostid="$ou" | grep -cxF "$nqn")
  assert "the other host does not see $nqn in discovery" [ "$n" = 0 ] || return 1
  n=$(disc_nqns "${FAB[@]}" --hostnqn="$other" --hostid="$ou" | grep -c "^$NQN_PREFIX")
  assert "the other host still sees the other $((NDRIVES - 1)) drives" [ "$n" = $((NDRIVES - 1)) ] || return 1
  refused=$(grep -c "connect refused: host not allowed" $LOGF)
  x timeout 60 nvme connect -n "$nqn" "${FAB[@]}" --hostnqn="$other" --hostid="$ou" --ctrl-loss-tmo=1; rc=$?
  assert "the other host cannot connect to $nqn" [ $rc != 0 ] || { nvme disconnect-all; return 1; }
  assert "fabrikd refused it (host not allowed)" [ "$(grep -c "connect refused: host not allowed" $LOGF)" -gt "$refused" ] || return 1
  assert "no controller left" [ "$(ctrl_count)" = 0 ] || return 1
  x timeout 60 $cmd "${CONN_OPTS[@]}"; rc=$?
  assert "the answered nvme connect command works" [ $rc = 0 ] || return 1
  for _ in $(seq 1 150); do DEV=$(ns_dev "$nqn") && break; sleep 0.1; done
  assert "namespace of $nqn appears" [ -n "$DEV" ] || return 1
  fio_verify compose-4k 4k 1 8 8 "$DEV" || return 1
  "$fabrik" controllers | sed 's/^/  | /'
  assert "fabrik controllers lists this host" bash -c "'$fabrik' controllers --json | grep -qF '$me'" || return 1
  x "$fabrik" decompose --host "$me"; rc=$?
  assert "fabrik decompose succeeds" [ $rc = 0 ] || return 1
  # fabrikd tears the controller down; the kernel's reconnects are refused, so it gives up.
  assert "the composed drive is taken away (controller gone)" wait_no_ctrls 60 || return 1
  x timeout 60 nvme connect -n "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "this host cannot connect after decompose" [ $rc != 0 ] || { nvme disconnect-all; return 1; }
  assert "fabrikd stops cleanly" target_stop
}
# Drive health from SMART: a second fabrikd serves the kernel's NVMe namespace (itself drive 1
# of the first fabrikd) with the block backend; its API reports that device's SMART log (read
# through the admin passthrough ioctl), the numbers nvme-cli reads.
s_smart() {
  # Its API through its local socket (no token: root reaches it).
  local fabrik conf=/tmp/fabrikd-smart.toml api=unix:$DATA/smart/api.sock pid out i rc ours theirs
  local FABRIKD_ARGS="${FABRIKD_ARGS:-} --allow-any-host"
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no management API: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "target starts" target_start || return 1
  nvme_connect_find "$(drive_nqn 1)" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "connect $(drive_nqn 1)" [ $rc = 0 ] || return 1
  printf '%s\n' 'box_name = "smartbox"' 'listen = ["127.0.0.1:4421"]' "api = \"127.0.0.1:8081\"" \
    '[[drive]]' 'id = "n0"' 'backend = "block"' "path = \"$DEV\"" > $conf
  echo "===== fabrikd (SMART, on $DEV) start $(date +%T) =====" >> $LOGF
  "$FABRIKD" --config $conf --data-dir "$DATA/smart" >> $LOGF 2>&1 &
  pid=$!
  for i in $(seq 1 100); do out=$("$fabrik" drives --api $api --json 2>/dev/null) && break; sleep 0.1; done
  echo "$out" | grep -E '"(source|source_error|power_on_hours|percentage_used|media_errors|temperature_celsius)"' | sed 's/^ */  | /'
  assert "drive health comes from the device's SMART log" grep -q '"source": "smart"' <<<"$out" ||
    { kill $pid; wait $pid; return 1; }
  timeout 30 nvme smart-log "$CTRL" > /tmp/smart.out 2>&1
  grep -E '^(critical_warning|percentage_used|media_errors|power_on_hours)' /tmp/smart.out | sed 's/^/  nvme-cli | /'
  theirs=$(awk -F: '/^power_on_hours/ {gsub(/[^0-9]/, "", $2); print $2}' /tmp/smart.out)
  ours=$(sed -n 's/.*"power_on_hours": *\([0-9]*\).*/\1/p' <<<"$out")
  assert "nvme smart-log $CTRL reports power-on hours" [ -n "$theirs" ] || { kill $pid; wait $pid; return 1; }
  assert "power-on hours as nvme smart-log reads them ($ours = $theirs)" [ "$ours" = "$theirs" ] ||
    { kill $pid; wait $pid; return 1; }
  kill -TERM $pid; wait $pid; rc=$?
  assert "the second fabrikd stops cleanly" [ $rc = 0 ] || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || return 1
  assert "fabrikd stops cleanly" target_stop
}
# Reads answered by their data alone: with --c2h-success fabrikd sets SUCCESS in a read's last
# C2HData and sends no response capsule, though the kernel host keeps SQ flow control on (SPDK's
# target does the same by default); fio verifies what it reads back through that.
s_c2h_success() {
  local FABRIKD_ARGS="${FABRIKD_ARGS:-} --c2h-success" rc
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd: nothing to test"; return 0 ;; esac
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "target starts with --c2h-success" target_start || return 1
  nvme_connect_find "$(drive_nqn 2)" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "connect $(drive_nqn 2)" [ $rc = 0 ] || return 1
  fio_verify c2h-4k 4k 2 16 16 "$DEV" || return 1
  fio_verify c2h-128k 128k 1 8 16 "$DEV" || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || return 1
  assert "fabrikd stops cleanly" target_stop
}
# ANA: with the target's ANA group made inaccessible through the API (fabrik ana-groups), the
# kernel reads the ANA log on the change notice and marks its path inaccessible; a read on the
# multipath node then waits for a usable path, without an error, and returns the data once the
# group is optimized again.
s_ana() {
  local fabrik nqn rc pid st state_of
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no management API: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  nqn=$(drive_nqn 4)
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "target starts" target_start || return 1
  export FABRIK_DATA_DIR=$DATA; unset FABRIK_API
  nvme_connect_find "$nqn" "${FAB[@]}" "${CONN_OPTS[@]}"; rc=$?
  assert "connect $nqn" [ $rc = 0 ] || return 1
  state_of() { cat /sys/class/nvme/"$(basename "$CTRL")"/nvme*c*n*/ana_state 2>/dev/null | head -1; }
  head -c 65536 /dev/urandom > /tmp/ana.pat
  x dd if=/tmp/ana.pat of="$DEV" bs=65536 count=1 oflag=direct conv=notrunc 2>&1 | tail -1
  x "$fabrik" ana-groups --group 1 --state inaccessible | sed 's/^/  | /'
  for _ in $(seq 1 100); do st=$(state_of); [ "$st" = inaccessible ] && break; sleep 0.1; done
  assert "the kernel's path turns inaccessible (ANA change notice, log read)" [ "$st" = inaccessible ] || return 1
  dd if="$DEV" of=/tmp/ana.got bs=65536 count=1 iflag=direct 2>/dev/null & pid=$!
  sleep 3
  assert "a read waits for a usable path, without an error" kill -0 $pid || return 1
  x "$fabrik" ana-groups --group 1 --state optimized | sed 's/^/  | /'
  wait $pid; rc=$?
  assert "the read completes once the group is optimized" [ $rc = 0 ] || return 1
  assert "and returns what was written" cmp /tmp/ana.pat /tmp/ana.got || return 1
  assert "the path is optimized again" [ "$(state_of)" = optimized ] || return 1
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || return 1
  assert "fabrikd stops cleanly" target_stop
}
# Two I/O modules of one box (fabrikd --module a / b on ports 4420 / 4421, one data directory
# each, the same drive files): the kernel connects to each drive through both (native
# multipath: one head, two paths, module A's group optimized through A). fio write+verify
# rounds (4k random, 128k sequential, several jobs) run on drive 00 (group 1, A's) and 01
# (group 2, B's) while module A is killed with kill -9 and restarted MOD_KILLS times: no fio
# error, no verify mismatch, and A's path comes back live and optimized each time. Then a
# planned failover: A into maintenance (its paths inaccessible, drained), back into service.
MOD_BOX=mbox
mod_port() { [ "$1" = a ] && echo 4420 || echo 4421; }
mod_api() { [ "$1" = a ] && echo 127.0.0.1:8091 || echo 127.0.0.1:8092; }
mod_start() {  # a|b: starts that module (MPID_a / MPID_b), waits until it listens
  local m=$1 port pid i
  port=$(mod_port "$m")
  echo "===== module $m start $(date +%T) =====" >> $LOGF
  # Each other's peer, with one token (in the config file).
  echo 'api_token = "interop-module-token-0123456789"' > /tmp/module.toml
  "$FABRIKD" --config /tmp/module.toml --module "$m" --box-name $MOD_BOX --data-dir "$DATA/module-$m" \
    --drive-dir "$DATA/module-drives" --drives 2 --drive-size 256M --listen "127.0.0.1:$port" \
    --api "$(mod_api $m)" --peer "http://$(mod_api "$([ $m = a ] && echo b || echo a)")" \
    --metrics off >> $LOGF 2>&1 &
  pid=$!
  eval "MPID_$m=$pid"
  for i in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "  module $m (pid $pid) is not listening on $port"; return 1
}
mod_path() {  # nqn a|b: "<controller state> <ana state>" of the path through that module
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    grep -q "trsvcid=$(mod_port "$2")" "$c/address" 2>/dev/null || continue
    echo "$(cat "$c/state") $(cat "$c"/nvme*c*n*/ana_state 2>/dev/null | head -1)"; return 0
  done
}
mod_wait_path() {  # nqn a|b "state ana" secs
  local i st
  for i in $(seq 1 $(( $4 * 10 ))); do
    st=$(mod_path "$1" "$2"); [ "$st" = "$3" ] && return 0
    sleep 0.1
  done
  echo "  path of $1 through module $2: '$st' after $4 s, not '$3'"; return 1
}
mod_fio_rounds() {  # stopfile dev...: write+verify rounds until stopfile exists; the first failure ends it
  local stop=$1 n=0; shift
  while [ ! -e "$stop" ]; do
    n=$((n + 1))
    fio_verify "mod4k-$n" 4k 4 8 16 "$@" > "/tmp/modfio-$n.log" 2>&1 &&
      FIO_RW=write fio_verify "mod128k-$n" 128k 2 8 32 "$@" >> "/tmp/modfio-$n.log" 2>&1 ||
      { echo "  fio round $n failed:"; tail -25 "/tmp/modfio-$n.log" | sed 's/^/  | /'; return 1; }
    echo $n > /tmp/modfio.rounds
  done
}
mod_ctrl() {  # nqn a|b: /dev/nvmeN of the path through that module
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    grep -q "trsvcid=$(mod_port "$2")" "$c/address" 2>/dev/null && { echo "/dev/$(basename "$c")"; return 0; }
  done
  return 1
}
mod_reservations() {  # nqn
  local ca cb out
  ca=$(mod_ctrl "$1" a) && cb=$(mod_ctrl "$1" b) || { echo "  no controller for each module"; return 1; }
  x nvme resv-register "$ca" -n 1 -k 0xaa -r 0 || return 1
  x nvme resv-acquire "$ca" -n 1 -c 0xaa -t 1 || return 1
  out=$(nvme resv-report "$cb" -n 1 -e 2>&1); echo "$out" | sed 's/^/  | /'
  assert "module b reports the reservation taken through module a (write exclusive, 1 registrant)" \
    bash -c "grep -qiE 'rtype *: *1' <<<'$out' && grep -qiE 'regctl *: *1' <<<'$out'" || return 1
  x nvme resv-release "$cb" -n 1 -c 0xaa -t 1 || return 1
  x nvme resv-register "$cb" -n 1 -c 0xaa -r 1 || return 1
  out=$(nvme resv-report "$ca" -n 1 -e 2>&1); echo "$out" | sed 's/^/  | /'
  assert "released and unregistered through b, module a reports none" \
    bash -c "grep -qiE 'rtype *: *0' <<<'$out' && grep -qiE 'regctl *: *0' <<<'$out'"
}
mod_stalls() {  # latlog kill_ms...: each failover's stall (ms): the longest command from its kill to the next
  local log=$1; shift
  awk -F, -v kills="$*" 'BEGIN { n = split(kills, k, " "); k[n + 1] = 1e18 }
    { t = $1 + 0; lat = $2 / 1e6
      for (i = 1; i <= n; i++) if (t >= k[i] && t < k[i + 1]) { if (lat > m[i]) m[i] = lat; break } }
    END { for (i = 1; i <= n; i++) printf "%.1f\n", m[i] }' "$log"
}
stall_summary() {  # stalls (ms, one per line) on stdin: "min X, median Y, max Z ms (N failovers)"
  sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "min %.1f, median %.1f, max %.1f ms (%d failovers)", v[1], v[int((NR + 1) / 2)], v[NR], NR }'
}
tcp_established() {  # port: established connections this machine serves on it
  awk -v p="$(printf ':%04X' "$1")" '$4 == "01" && substr($2, length($2) - 4) == p { n++ } END { print n + 0 }' /proc/net/tcp
}
ms_now() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }  # busybox date has no %N
jnum() { grep -o "\"$1\": *-\?[0-9.]*" "$2" | head -1 | sed 's/.*: *//'; }  # first "KEY": NUMBER of a JSON file
s_modules() {
  local fabrik nqn0 nqn1 m r rc=0 ok=1 devs=() fpid stop=/tmp/modfio.stop out kills=${MOD_KILLS:-20}
  local ppid t0 kill_ms=() stalls
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no modules: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "module a starts" mod_start a || return 1
  assert "module b starts" mod_start b || return 1
  nqn0=nqn.2024-01.io.fabrik:$MOD_BOX:drive-00; nqn1=nqn.2024-01.io.fabrik:$MOD_BOX:drive-01
  for nqn in $nqn0 $nqn1; do
    for m in a b; do
      x timeout 60 nvme connect -t tcp -a 127.0.0.1 -s "$(mod_port $m)" -n "$nqn" \
        --reconnect-delay=1 --ctrl-loss-tmo=-1 || { assert "connect $nqn through module $m" false; return 1; }
    done
    for _ in $(seq 1 150); do DEV=$(ns_dev "$nqn") && break; sleep 0.1; done
    assert "one multipath namespace for $nqn" [ -n "$DEV" ] || return 1
    devs+=("$DEV")
  done
  out=$(nvme list-subsys "${devs[0]}"); echo "$out" | sed 's/^/  | /'
  assert "nvme list-subsys: two live paths" [ "$(grep -c ' live' <<<"$out")" = 2 ] || return 1
  assert "through A optimized, through B non-optimized" \
    bash -c "grep -q 'trsvcid=4420.* live optimized' <<<'$out' && grep -q 'trsvcid=4421.* live non-optimized' <<<'$out'" || return 1
  assert "drive 01: optimized through B" mod_wait_path "$nqn1" b "live optimized" 5 || return 1
  out=$("$fabrik" list-subsys | grep -A3 "NQN=$nqn0 "); echo "$out" | sed 's/^/  | /'
  assert "fabrik list-subsys shows the same paths and states" \
    bash -c "grep -q 'trsvcid=4420.* live optimized' <<<'$out' && grep -q 'trsvcid=4421.* live non-optimized' <<<'$out'" || return 1
  rm -f $stop /tmp/modfio.rounds /tmp/probe_*.log
  mod_fio_rounds $stop "${devs[@]}" & fpid=$!
  # The stall probe: 4k reads one at a time on drive 00, the longest per 10 ms logged.
  t0=$(ms_now)
  fio --name=probe --filename="${devs[0]}" --rw=randread --bs=4k --direct=1 --ioengine=psync \
    --time_based --runtime=3600 --write_lat_log=/tmp/probe --log_avg_msec=10 --log_max_value=1 \
    > /tmp/probe.out 2>&1 & ppid=$!
  sleep 2
  for r in $(seq 1 "$kills"); do
    kill_ms+=($(( $(ms_now) - t0 )))
    kill -9 "$MPID_a"; wait "$MPID_a" 2>/dev/null
    sleep 1.5   # I/O goes on through module B
    assert "kill $r: fio goes on" kill -0 $fpid || { ok=0; break; }
    assert "kill $r: module a restarts" mod_start a || { ok=0; break; }
    assert "kill $r: A's path of drive 00 is live and optimized again" \
      mod_wait_path "$nqn0" a "live optimized" 30 || { ok=0; break; }
  done
  echo "  $r kill -9 rounds; fio rounds done so far: $(cat /tmp/modfio.rounds 2>/dev/null || echo 0)"
  # Planned failover: A into maintenance, drained, B alone, A back.
  export FABRIK_DATA_DIR=$DATA/module-a; unset FABRIK_API
  kill_ms+=($(( $(ms_now) - t0 )))
  x "$fabrik" module --maintenance on | sed 's/^/  | /'
  assert "maintenance: A's path turns inaccessible" mod_wait_path "$nqn0" a "live inaccessible" 20 || ok=0
  for _ in $(seq 1 100); do "$fabrik" module --json | grep -q '"drained": *true' && break; sleep 0.1; done
  assert "module a drains" bash -c "'$fabrik' module --json | grep -q '\"drained\": *true'" || ok=0
  sleep 2
  x "$fabrik" module --maintenance off | sed 's/^/  | /'
  assert "back in service: A's path is optimized" mod_wait_path "$nqn0" a "live optimized" 20 || ok=0
  sleep 1
  touch $stop
  wait $fpid; rc=$?
  kill -INT $ppid; wait $ppid
  assert "the stall probe saw no error" bash -c "! grep -qiE 'err= *[1-9]|error' /tmp/probe.out" ||
    { ok=0; tail -5 /tmp/probe.out | sed 's/^/  | /'; }
  if [ -s /tmp/probe_lat.1.log ]; then
    stalls=$(mod_stalls /tmp/probe_lat.1.log "${kill_ms[@]}")
    echo "  I/O stall at each kill -9 (kernel host, 4k reads on drive 00): $(head -n -1 <<<"$stalls" | stall_summary)"
    echo "  | $(head -n -1 <<<"$stalls" | tr '\n' ' ')"
    echo "  I/O stall at the planned failover: $(tail -1 <<<"$stalls") ms"
  else
    assert "the stall probe logged its latencies" false; ok=0
  fi
  grep -hE '^ +\[mod' /tmp/modfio-*.log | head -8
  # The configuration the modules share: drive 01 composed to this host through module b is
  # composed on module a too; decomposed through a, gone from b.
  x env FABRIK_DATA_DIR=$DATA/module-b "$fabrik" compose --host "$(host_nqn)" --drives 01 | sed 's/^/  | /'
  assert "a composition made through module b is on module a" \
    bash -c "'$fabrik' compositions --json | grep -q '$(host_nqn)'" || ok=0
  x "$fabrik" decompose --host "$(host_nqn)"
  assert "decomposed through module a, it is gone from module b" \
    bash -c "! FABRIK_DATA_DIR=$DATA/module-b '$fabrik' compositions --json | grep -q '$(host_nqn)'" || ok=0
  assert "module a: configuration in step" \
    bash -c "'$fabrik' module --json | grep -q '\"config_sync\": *\"in-step\"'" || ok=0
  # A reservation registered and acquired through module a (nvme-cli on that path's
  # controller) is what module b reports; released through b, a reports none.
  mod_reservations "$nqn0" || ok=0
  assert "fio: $(cat /tmp/modfio.rounds 2>/dev/null || echo 0) write+verify rounds, no error, no mismatch" [ $rc = 0 ]
  assert "at least 2 fio rounds completed" [ "$(cat /tmp/modfio.rounds 2>/dev/null || echo 0)" -ge 2 ] || rc=1
  dmesg | grep -iE 'nvme.*(I/O error|failover|no usable path|ANATT)' | tail -5 | sed 's/^/  dmesg: /'
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || rc=1
  for m in a b; do
    eval "kill -TERM \$MPID_$m; wait \$MPID_$m"
    assert "module $m stops cleanly" [ $? = 0 ] || rc=1
  done
  [ $ok = 1 ] && [ $rc = 0 ]
}
# fabrik's own host across the same failovers: one multipath session over both modules
# (fabrik bench --path), 4k random reads and writes with --verify on drives 00 and 01, in
# MOD_KILLS runs of a few seconds with one kill -9 of module A in each: no error, no bad block.
# Each run's longest command is that failover's stall.
s_modules_fabrik() {
  local fabrik nqn0 nqn1 r rc ok=1 bpid kills=${MOD_KILLS:-20} errors stall stalls=() j
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no modules: nothing to test"; return 0 ;; esac
  fabrik=$(command -v fabrik) || { echo "  no fabrik binary in the guest"; return 1; }
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "module a starts" mod_start a || return 1
  assert "module b starts" mod_start b || return 1
  nqn0=nqn.2024-01.io.fabrik:$MOD_BOX:drive-00; nqn1=nqn.2024-01.io.fabrik:$MOD_BOX:drive-01
  for r in $(seq 1 "$kills"); do
    j=/tmp/modbench-$r.json
    timeout 120 "$fabrik" bench -t tcp -a 127.0.0.1 -s "$(mod_port a)" --path "127.0.0.1:$(mod_port b)" \
      -n "$nqn0" -n "$nqn1" --rw randrw --bs 4k --iodepth 8 --size 8m --time 4 --verify --verify-seed 7 \
      --ctrl-loss-tmo -1 --reconnect-delay 0.2 --json --quiet > $j 2> /tmp/modbench-$r.err & bpid=$!
    # The kill comes once the bench's sessions are up (an admin and an I/O queue per drive
    # through module b, the second path each connects) and I/O has run a moment.
    for _ in $(seq 1 100); do [ "$(tcp_established "$(mod_port b)")" -ge 4 ] && break; sleep 0.1; done
    sleep 1
    kill -9 "$MPID_a"; wait "$MPID_a" 2>/dev/null
    wait $bpid; rc=$?
    errors=$(jnum errors $j); stall=$(jnum max $j)
    assert "kill $r: fabrik bench --verify: $(jnum ios $j) I/Os, exit 0, ${errors:-?} bad blocks" \
      bash -c "[ $rc = 0 ] && [ '$errors' = 0 ]" || { ok=0; tail -5 /tmp/modbench-$r.err | sed 's/^/  | /'; break; }
    stalls+=("$(awk -v us="$stall" 'BEGIN { printf "%.1f", us / 1000 }')")
    assert "kill $r: module a restarts" mod_start a || { ok=0; break; }
  done
  kill -0 "$MPID_a" 2>/dev/null || mod_start a
  grep -h '"events"' -A4 /tmp/modbench-1.json | sed 's/^/  | /'
  echo "  I/O stall at each kill -9 (fabrik host, longest command of each run): $(printf '%s\n' "${stalls[@]}" | stall_summary)"
  echo "  | ${stalls[*]}"
  for m in a b; do
    eval "kill -TERM \$MPID_$m; wait \$MPID_$m"
    assert "module $m stops cleanly" [ $? = 0 ] || ok=0
  done
  [ $ok = 1 ]
}
# Reservations between two hosts: two host NQNs, each with its own host ID, on one kernel (each
# its own controller: host 1 through module a, host 2 through module b). nvme resv-* runs on
# each host's controller, and the other host's I/O (nvme io-passthru on its controller) gets
# Reservation Conflict where the type says and passes where it allows; a preempted host finds
# the notice in its log page 80h unless it masked it (feature 82h); a reservation is kept across
# a restart of both modules.
resv_io() {  # ctrl read|write: nvme-cli's answer; the command's exit status
  local op=2 dir=-r
  [ "$2" = write ] && { op=1; dir=-w; }
  nvme io-passthru "$1" -n 1 -o $op --cdw10=0 --cdw11=0 --cdw12=0 -l "$RESV_LBA" $dir \
    -i /tmp/resv.data -b 2>&1 > /dev/null
}
resv_allows() {  # "what" ctrl read|write yes|no
  local out rc
  out=$(resv_io "$2" "$3"); rc=$?
  if [ "$4" = yes ]; then
    assert "$1: $3 passes" [ $rc = 0 ] || { echo "  | $out"; return 1; }
  else
    assert "$1: $3 gets Reservation Conflict" \
      bash -c "[ $rc != 0 ] && grep -qi 'reservation.conflict' <<<'$out'" || { echo "  | $out"; return 1; }
  fi
}
resv_notice() {  # ctrl: "<count> <type> <nsid>" of the next Reservation Notification page
  nvme get-log "$1" --log-id=0x80 --log-len=64 -b > /tmp/resv.log 2>/dev/null || return 1
  echo "$(od -An -tu8 -N8 /tmp/resv.log | tr -d ' ') $(od -An -tu1 -j8 -N1 /tmp/resv.log | tr -d ' ') $(od -An -tu4 -j12 -N4 /tmp/resv.log | tr -d ' ')"
}
resv_ctrl() {  # nqn hostnqn: /dev/nvmeN of that host's controller
  local c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && [ "$(cat "$c/hostnqn" 2>/dev/null)" = "$2" ] &&
      { echo "/dev/$(basename "$c")"; return 0; }
  done
  return 1
}
s_resv_hosts() {
  local nqn u1 u2 h1 h2 c1 c2 m ok=1 n
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no reservations: nothing to test"; return 0 ;; esac
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  [ -z "$FPID" ] || target_stop || return 1
  assert "module a starts" mod_start a || return 1
  assert "module b starts" mod_start b || return 1
  nqn=nqn.2024-01.io.fabrik:$MOD_BOX:drive-00
  u1=$(cat /proc/sys/kernel/random/uuid); u2=$(cat /proc/sys/kernel/random/uuid)
  h1=nqn.2014-08.org.nvmexpress:uuid:$u1; h2=nqn.2014-08.org.nvmexpress:uuid:$u2
  x timeout 60 nvme connect -t tcp -a 127.0.0.1 -s "$(mod_port a)" -n "$nqn" --hostnqn="$h1" --hostid="$u1" \
    --reconnect-delay=1 --ctrl-loss-tmo=-1 || return 1
  x timeout 60 nvme connect -t tcp -a 127.0.0.1 -s "$(mod_port b)" -n "$nqn" --hostnqn="$h2" --hostid="$u2" \
    --reconnect-delay=1 --ctrl-loss-tmo=-1 || return 1
  c1=$(resv_ctrl "$nqn" "$h1") && c2=$(resv_ctrl "$nqn" "$h2") || { echo "  no controller for each host"; return 1; }
  echo "  host 1: $c1 (module a), host 2: $c2 (module b)"
  for _ in $(seq 1 150); do DEV=$(ns_dev "$nqn") && break; sleep 0.1; done
  RESV_LBA=$(cat "/sys/block/$(basename "$DEV")/queue/logical_block_size") || return 1
  head -c "$RESV_LBA" /dev/urandom > /tmp/resv.data
  resv_allows "no reservation, host 2" "$c2" write yes || ok=0
  # Write Exclusive, held by host 1: host 2 reads, does not write.
  x nvme resv-register "$c1" -n 1 -k 0x11 -r 0 || return 1
  x nvme resv-acquire "$c1" -n 1 -c 0x11 -t 1 || return 1
  resv_allows "write exclusive held by host 1, host 2" "$c2" read yes || ok=0
  resv_allows "write exclusive held by host 1, host 2" "$c2" write no || ok=0
  resv_allows "write exclusive held by host 1, host 1" "$c1" write yes || ok=0
  # Exclusive Access: host 2 does not read either.
  x nvme resv-release "$c1" -n 1 -c 0x11 -t 1 || return 1
  x nvme resv-acquire "$c1" -n 1 -c 0x11 -t 2 || return 1
  resv_allows "exclusive access held by host 1, host 2" "$c2" read no || ok=0
  # Exclusive Access - Registrants Only: host 2, once registered, reads and writes.
  x nvme resv-release "$c1" -n 1 -c 0x11 -t 2 || return 1
  x nvme resv-acquire "$c1" -n 1 -c 0x11 -t 4 || return 1
  resv_allows "registrants only, host 2 not registered" "$c2" read no || ok=0
  x nvme resv-register "$c2" -n 1 -k 0x22 -r 0 || return 1
  resv_allows "registrants only, host 2 registered" "$c2" write yes || ok=0
  out=$(nvme resv-report "$c2" -n 1 -e 2>&1); echo "$out" | sed 's/^/  | /'
  assert "the report through module b: type 4, 2 registrants" \
    bash -c "grep -qiE 'rtype *: *4' <<<'$out' && grep -qiE 'regctl *: *2' <<<'$out'" || ok=0
  # Host 2 preempts host 1 and takes Write Exclusive: host 1 is told (log page 80h through
  # module a: registration preempted, NSID 1), unless it masks that.
  x nvme resv-acquire "$c2" -n 1 -c 0x22 -p 0x11 -a 1 -t 1 || return 1
  n=$(resv_notice "$c1"); echo "  host 1's notification page: count type nsid = $n"
  assert "host 1 is told its registration was preempted" [ "${n#* }" = "1 1" ] || ok=0
  assert "one page: the next read is empty" [ "$(resv_notice "$c1")" = "0 0 0" ] || ok=0
  resv_allows "write exclusive held by host 2, host 1 (preempted)" "$c1" write no || ok=0
  x nvme resv-register "$c1" -n 1 -k 0x11 -r 0 || return 1
  x nvme set-feature "$c1" -f 0x82 -n 1 -v 2 | sed 's/^/  | /'
  # This time Preempt and Abort (RACQA 2): made on module a too, which lets host 1's commands
  # there finish first.
  x nvme resv-acquire "$c2" -n 1 -c 0x22 -p 0x11 -a 2 -t 1 || return 1
  assert "masked (feature 82h): no page" [ "$(resv_notice "$c1")" = "0 0 0" ] || ok=0
  resv_allows "preempted and aborted, host 1" "$c1" write no || ok=0
  # Kept across a restart of both modules (the kernel reconnects each host).
  for m in a b; do eval "kill -TERM \$MPID_$m; wait \$MPID_$m"; done
  assert "module a restarts" mod_start a || return 1
  assert "module b restarts" mod_start b || return 1
  assert "host 1 reconnects" mod_wait_path "$nqn" a "live optimized" 30 || ok=0
  assert "host 2 reconnects" mod_wait_path "$nqn" b "live non-optimized" 30 || ok=0
  resv_allows "after the restart, host 1" "$c1" write no || ok=0
  resv_allows "after the restart, host 1" "$c1" read yes || ok=0
  resv_allows "after the restart, host 2 (holder)" "$c2" write yes || ok=0
  x nvme resv-release "$c2" -n 1 -c 0x22 -t 1 -a 1 || ok=0   # clear: no registrants, no reservation
  out=$(nvme resv-report "$c1" -n 1 -e 2>&1)
  assert "cleared: module a reports none" \
    bash -c "grep -qiE 'rtype *: *0' <<<'$out' && grep -qiE 'regctl *: *0' <<<'$out'" || ok=0
  resv_allows "cleared, host 1" "$c1" write yes || ok=0
  x timeout 60 nvme disconnect-all
  assert "disconnected" wait_no_ctrls 30 || ok=0
  for m in a b; do
    eval "kill -TERM \$MPID_$m; wait \$MPID_$m"
    assert "module $m stops cleanly" [ $? = 0 ] || ok=0
  done
  [ $ok = 1 ]
}
# Metrics of the fio traffic: fabrikd's /metrics (default 127.0.0.1:9420), scraped in the guest
# right after the fio step, counts bytes read and written on every namespace fio used, and the
# kernel's connections are open on the port.
http_get() {  # URL (http://HOST:PORT/PATH): busybox wget, else bash's /dev/tcp
  if command -v wget >/dev/null; then wget -qO- "$1"; return; fi
  local hp=${1#http://} path
  path=/${hp#*/}; hp=${hp%%/*}
  exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hp" >&3
  tr -d '\r' <&3 | sed '1,/^$/d'; exec 3<&-
}
metric() {  # TEXT NAME LABELS: the sample's value (empty if none)
  awk -v k="$2{$3}" '$1 == k { print $2; exit }' <<<"$1"
}
s_metrics() {
  local out i id kind v bad=0
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no metrics: nothing to test"; return 0 ;; esac
  out=$(http_get http://127.0.0.1:9420/metrics)
  assert "GET http://127.0.0.1:9420/metrics answers ($(wc -l <<<"$out") lines)" grep -q '^fabrik_build_info' <<<"$out" || return 1
  for ((i = 0; i < FIO_DEVS && i < NDRIVES; i++)); do
    id=$(printf %02d $i)
    for kind in read write; do
      v=$(metric "$out" "fabrik_drive_${kind}_bytes_total" "drive=\"$id\"")
      echo "  drive $id: ${v:-no} bytes ${kind}"
      [ -n "$v" ] && [ "${v%.*}" -gt 0 ] 2>/dev/null || bad=1
    done
  done
  assert "read and write bytes > 0 on the $FIO_DEVS namespaces fio used" [ $bad = 0 ] || return 1
  v=$(awk '/^fabrik_port_connections_open\{/ { s += $2 } END { print s + 0 }' <<<"$out")
  assert "fabrik_port_connections_open > 0 ($v)" [ "${v%.*}" -gt 0 ] || return 1
  v=$(awk '$1 == "fabrik_connected_hosts" { print $2 }' <<<"$out")
  assert "fabrik_connected_hosts is 1 (${v:-none})" [ "$v" = 1 ] || return 1
  assert "the host is named by an alias, never by its NQN" lacks "$(host_nqn)" "$out"
}
lacks() { ! grep -qF -- "$1" <<<"$2"; }  # WORD TEXT
io_failed() { [ "$1" != 0 ] && grep -qiE 'no data available|input/output error|I/O error' <<<"$2"; }  # RC OUTPUT
# Many boxes: a central discovery controller and two boxes registered with it, each its own
# fabrikd on loopback; the kernel host discovers from the CDC alone.
CDC_PORT=8009
cdc_seen() {  # hostnqn -> the subsystem NQNs nvme discover lists from the CDC, sorted
  timeout 30 nvme discover -t tcp -a 127.0.0.1 -s $CDC_PORT --hostnqn="$1" 2>/dev/null |
    awk '/^subnqn:/ { print $2 }' | sort
}
cdc_wait() {  # hostnqn count secs
  local end=$(( $(date +%s) + $3 ))
  while [ "$(cdc_seen "$1" | grep -c .)" != "$2" ]; do
    [ "$(date +%s)" -ge $end ] && return 1
    sleep 0.3
  done
}
s_cdc() {
  local d=$DATA/cdc pids=() allowed other out ev=/tmp/uevents.log dc rc=0
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no CDC: nothing to test"; return 0 ;; esac
  allowed=$(host_nqn) other=nqn.2014-08.org.nvmexpress:uuid:6f1c2b6e-0000-4000-8000-00000000cdc0
  rm -rf $d; mkdir -p $d/cdc $d/box1 $d/box2
  local common=(--api off --metrics off --backend ram --drive-size 64M --host "$allowed")
  # Started directly (not through x, whose subshell would be the PID to kill).
  echo "+ fabrikd --role cdc --listen 127.0.0.1:$CDC_PORT; box1 (2 drives) on 4431 and box2 (3) on 4432 with --cdc"
  "$FABRIKD" --role cdc --data-dir $d/cdc --listen 127.0.0.1:$CDC_PORT --api off --metrics off >> $LOGF 2>&1 &
  pids+=($!)
  wait_port 127.0.0.1 $CDC_PORT 20 || { assert "the CDC listens" false; kill "${pids[@]}"; return 1; }
  "$FABRIKD" --data-dir $d/box1 --listen 127.0.0.1:4431 --box-name box1 --drives 2 \
    --cdc 127.0.0.1:$CDC_PORT "${common[@]}" >> $LOGF 2>&1 &
  pids+=($!)
  "$FABRIKD" --data-dir $d/box2 --listen 127.0.0.1:4432 --box-name box2 --drives 3 \
    --cdc 127.0.0.1:$CDC_PORT "${common[@]}" >> $LOGF 2>&1 &
  pids+=($!)
  cdc_wait "$allowed" 5 30; out=$(cdc_seen "$allowed"); echo "$out" | sed 's/^/  | /'
  assert "nvme discover against the CDC lists both boxes' 5 subsystems for the allowed host" \
    bash -c "[ \"\$(grep -c :box1:drive- <<<'$out')\" = 2 ] && [ \"\$(grep -c :box2:drive- <<<'$out')\" = 3 ]" || rc=1
  out=$(timeout 30 nvme discover -t tcp -a 127.0.0.1 -s $CDC_PORT --hostnqn="$allowed" 2>&1)
  assert "each entry is a path to its box (trsvcid 4431 / 4432), not to the CDC" \
    bash -c "[ \"\$(grep -c 'trsvcid: *4431' <<<'$out')\" = 2 ] && [ \"\$(grep -c 'trsvcid: *4432' <<<'$out')\" = 3 ]" || rc=1
  assert "none for another host" [ -z "$(cdc_seen "$other")" ] || rc=1
  x timeout 60 nvme connect -t tcp -a 127.0.0.1 -s 4432 -n nqn.2024-01.io.fabrik:box2:drive-02 || rc=1
  local i; for i in $(seq 50); do ns_dev nqn.2024-01.io.fabrik:box2:drive-02 > /dev/null && break; sleep 0.2; done
  assert "a subsystem found through the CDC connects: its namespace appears" \
    ns_dev nqn.2024-01.io.fabrik:box2:drive-02 || rc=1
  timeout 60 nvme disconnect -n nqn.2024-01.io.fabrik:box2:drive-02 > /dev/null
  # The kernel reports a discovery log change notice as a uevent (NVME_AEN=0x70f002); the guest
  # has no udev (nor a kernel uevent helper): busybox's uevent applet listens for them.
  if busybox --list 2>/dev/null | grep -qx uevent; then
    rm -f $ev; printf '#!/bin/sh\n[ "$SUBSYSTEM" = nvme ] && { env; echo --; } >> %s\n' $ev > /tmp/uevent.sh
    chmod +x /tmp/uevent.sh
    busybox uevent /tmp/uevent.sh > /dev/null 2>&1 & local mon=$!
    x timeout 30 nvme discover -t tcp -a 127.0.0.1 -s $CDC_PORT --hostnqn="$allowed" --persistent > /dev/null || rc=1
    dc=$(for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn)" = nqn.2014-08.org.nvmexpress.discovery ] && basename $c; done | head -1)
    assert "a persistent discovery connection to the CDC (${dc:-none}; dctype: $(cat /sys/class/nvme/$dc/dctype 2>/dev/null || echo 'not in this kernel'"'"'s sysfs'))" [ -n "$dc" ] || rc=1
    sleep 1
    : > $ev   # only what comes from here on counts
    kill -TERM "${pids[2]}"; wait "${pids[2]}"
    for i in $(seq 50); do grep -q 'NVME_AEN=0x70f002' $ev 2>/dev/null && break; sleep 0.2; done
    grep -h -E 'NVME_AEN|DEVNAME|ACTION' $ev 2>/dev/null | sed 's/^/  uevent: /' | head -6
    assert "box2's clean stop reached the persistent connection as a discovery log change notice (uevent NVME_AEN=0x70f002)" \
      grep -q "NVME_AEN=0x70f002" $ev || rc=1
    kill $mon 2>/dev/null; wait $mon 2>/dev/null
    [ -n "$dc" ] && echo 1 > /sys/class/nvme/$dc/delete_controller
  else
    assert "busybox has its uevent applet (to see the kernel's notice)" false; rc=1
    kill -TERM "${pids[2]}"; wait "${pids[2]}"
  fi
  out=$(cdc_seen "$allowed")
  assert "after box2 stopped, the CDC lists box1's 2 subsystems only" [ "$(grep -c . <<<"$out")" = 2 ] || rc=1
  kill -KILL "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
  cdc_wait "$allowed" 0 10
  assert "box1 killed (-9): the CDC lost its registration's connection and lists nothing" [ -z "$(cdc_seen "$allowed")" ] || rc=1
  kill -TERM "${pids[0]}"; wait "${pids[0]}"
  return $rc
}
# The CSI driver with the kernel host: fabrik-csi (controller and node plugin in one process,
# the box through its local API socket) driven by csi-node-check as the attacher and the kubelet
# would: volumes made, published, staged (nvme connect, mkfs, mount), written, unstaged
# (disconnected), staged again and read back; a block volume through its device file.
s_csi() {
  local csi check d=$DATA/csi box pid rc=0 i log=/tmp/fabrik-csi.log
  case $FABRIKD in */fake-fabrikd) echo "  fake-fabrikd has no volumes: nothing to test"; return 0 ;; esac
  csi=$(command -v fabrik-csi) && check=$(command -v csi-node-check) ||
    { echo "  no fabrik-csi or csi-node-check in the guest"; return 1; }
  [ "$(ctrl_count)" = 0 ] || { timeout 60 nvme disconnect-all; wait_no_ctrls 30; }
  rm -rf $d; mkdir -p $d/box $d/work
  echo "+ fabrikd --box-name csibox --listen 127.0.0.1:4434 --drives 4 --drive-size 128M --backend file"
  "$FABRIKD" --data-dir $d/box --listen 127.0.0.1:4434 --box-name csibox --drives 4 --drive-size 128M \
    --backend file --api off --metrics off >> $LOGF 2>&1 &
  box=$!
  wait_port 127.0.0.1 4434 60 || { assert "the box listens" false; kill $box; return 1; }
  for i in $(seq 50); do [ -S $d/box/api.sock ] && break; sleep 0.1; done
  echo "+ fabrik-csi --endpoint unix:///tmp/csi.sock --box unix:$d/box/api.sock,drives=00-03 --node-id guest-node"
  "$csi" --endpoint unix:///tmp/csi.sock --box unix:$d/box/api.sock,drives=00-03 --node-id guest-node > $log 2>&1 &
  pid=$!
  for i in $(seq 50); do [ -S /tmp/csi.sock ] && break; sleep 0.1; done
  x timeout 300 "$check" unix:///tmp/csi.sock $d/work; rc=$?
  assert "the CSI node lifecycle passes with the kernel host" [ $rc = 0 ] || rc=1
  assert "no volume is left connected" [ "$(ctrl_count)" = 0 ] || rc=1
  kill -TERM $pid; wait $pid
  assert "fabrik-csi stops on SIGTERM, its socket removed" [ ! -e /tmp/csi.sock ] || rc=1
  kill -TERM $box; wait $box
  tail -n 30 $log | sed 's/^/  fabrik-csi: /'
  [ -n "$OUT" ] && cp $log $OUT/
  return $rc
}
suite_after_fio() {
  skipped metrics || step "fabrikd /metrics counts the fio traffic (scraped in the guest)" s_metrics
}
suite_extra_steps() {
  skipped compose || step "compose a drive through the API, kernel connect + I/O, decompose" s_compose
  skipped smart || step "drive health from the SMART log of an NVMe drive (block backend)" s_smart
  skipped block || step "block backend on kernel block devices (null_blk)" s_block
  skipped lost || step "a lost writeback fails every later Flush and FUA write (ext4 on a full device)" s_lost_write
  skipped c2h || step "reads answered by their data alone (--c2h-success): fio verify" s_c2h_success
  skipped ana || step "ANA: an inaccessible group holds the kernel's I/O until it is optimized" s_ana
  skipped modules || step "two I/O modules: fio verify across ${MOD_KILLS:-20} kill -9 of module A and a planned failover" s_modules
  skipped modfabrik || step "two I/O modules: fabrik bench --verify across ${MOD_KILLS:-20} kill -9 of module A" s_modules_fabrik
  skipped resv || step "reservations between two hosts through both modules (nvme resv-*), kept across a restart" s_resv_hosts
  skipped cdc || step "a central discovery controller: two boxes register, nvme discover per host, notices" s_cdc
  skipped csi || step "the CSI driver's node side: stage, publish, unstage with nvme connect, mkfs, mounts" s_csi
  step "fabrikd log has no panic" s_log
}

echo "fabrikd: $FABRIKD ($(stat -c %s "$FABRIKD") bytes), backend $BACKEND, $NDRIVES x $DRIVE_SIZE, data dir $DATA"
"$FABRIKD" --version 2>&1 | head -1
nvmf_suite_run; rc=$?
[ -n "$FPID" ] && { kill -KILL $FPID 2>/dev/null; wait $FPID 2>/dev/null; }
[ $rc = 0 ] || failure_tail
if [ -n "$OUT" ]; then cp $LOGF $OUT/; dmesg > $OUT/dmesg.txt; fi
exit $rc
