# tests/interop/guest-lib.sh - helpers for guest scripts; in the guest as /vmh/lib.sh
#   . /vmh/lib.sh
#
# Generic:
#   vmh_now                      guest uptime in seconds (float)
#   x CMD...                     echo "+ CMD" and run it
#   args_to_env "$@"             export every VAR=value argument
# Test framework (results summarised by t_summary; exit status = number of failures):
#   step "title" FN [ARGS...]    run FN in this shell, PASS if it returns 0, else FAIL +
#                                dmesg tail + $ON_FAIL hook (e.g. print the target's log)
#   assert "what" CMD...         run CMD; on failure print "ASSERT FAILED: what" and return 1
#   t_summary                    prints results + "N passed, M failed"; returns M (capped 255)
# NVMe host side (no udev in the guest: sysfs + devtmpfs polling):
#   wait_port ADDR PORT SECS     until something listens on ADDR:PORT (bash /dev/tcp)
#   subsys_nqns                  "nqn dir" lines for every /sys/class/nvme-subsystem entry
#   ns_dev NQN                   /dev/nvmeXnY of namespace 1 of subsystem NQN (or fails)
#   ctrl_dev NQN                 /dev/nvmeX of a live controller of subsystem NQN
#   wait_ns_count PREFIX N SECS  until N subsystems whose NQN starts with PREFIX have a
#                                namespace block device node
#   wait_no_ctrls SECS           until /sys/class/nvme is empty
#   disc_nqns ARGS...            nvme discover ARGS, print one subnqn per line
#   nvme_connect_find NQN CONNECT-ARGS...   nvme connect, wait; sets DEV=/dev/nvmeXnY CTRL=/dev/nvmeX
#   fio_verify LABEL BS NUMJOBS IODEPTH MIB DEV...   random write + crc32c verify, one job
#                                section per device (each with NUMJOBS clones on disjoint ranges)
# Kernel target (configfs nvmet) for the harness self-test:
#   nvmet_port PORTID TRTYPE TRADDR TRSVCID
#   nvmet_subsys NQN BLOCKDEV [HOSTNQN|any]
#   nvmet_link NQN PORTID / nvmet_unlink NQN PORTID / nvmet_subsys_del NQN / nvmet_clear
#   nvmet_export NQN DEV TRTYPE TRADDR TRSVCID PORTID   (one-shot, as in the reference harness)
# RDMA (Soft-RoCE):
#   rxe_pair_setup               veth0(10.99.0.1)+rxe0 <-> veth1(10.99.0.2)+rxe1, with policy
#                                routing so traffic between the two local IPs really
#                                crosses the veth (otherwise Linux routes it via lo and
#                                rxe drops it).  Override IPs with RXE_IP0 / RXE_IP1.
#   veth_bytes IF                rx+tx bytes of IF
CFG=/sys/kernel/config/nvmet
RXE_IP0=${RXE_IP0:-10.99.0.1}
RXE_IP1=${RXE_IP1:-10.99.0.2}
vmh_now() { cut -d' ' -f1 /proc/uptime; }
x() { echo "+ $*"; "$@"; }
args_to_env() { local a; for a in "$@"; do case $a in *=*) export "${a?}" ;; esac; done; }

# ------------------------------------------------------------------ test framework
T_PASSED=0; T_FAILED=0; T_RESULTS=()
ON_FAIL=${ON_FAIL:-}
dmesg_tail() { echo "---- dmesg (last ${1:-25} lines)"; dmesg | tail -n "${1:-25}" | sed 's/^/  dmesg: /'; echo "----"; }
step() {  # "title" fn args...
  local title=$1 t0 t1 rc; shift
  t0=$(vmh_now)
  echo; echo "==== STEP: $title  (uptime ${t0}s)"
  "$@"; rc=$?
  t1=$(vmh_now)
  local dt; dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1fs", b-a}')
  if [ $rc = 0 ]; then
    T_PASSED=$((T_PASSED + 1)); T_RESULTS+=("PASS  $dt  $title"); echo "==== PASS: $title ($dt)"
  else
    T_FAILED=$((T_FAILED + 1)); T_RESULTS+=("FAIL  $dt  $title"); echo "==== FAIL: $title (rc=$rc, $dt)"
    dmesg_tail 25
    [ -n "$ON_FAIL" ] && $ON_FAIL
  fi
  return 0
}
assert() {  # "what" cmd...
  local what=$1; shift
  "$@" && return 0
  echo "ASSERT FAILED: $what   [$*]"
  return 1
}
t_summary() {
  local r
  echo; echo "==================== SUMMARY (${T_SUITE:-suite}, guest uptime $(vmh_now)s)"
  for r in "${T_RESULTS[@]}"; do echo "  $r"; done
  echo "${T_PASSED} passed, ${T_FAILED} failed"
  [ "$T_FAILED" -gt 255 ] && return 255
  return "$T_FAILED"
}

# ------------------------------------------------------------------ host side helpers
wait_port() {  # addr port secs
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -le $end ]; do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
subsys_nqns() {
  local s
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ -e "$s/subsysnqn" ] && echo "$(cat "$s/subsysnqn") $s"
  done
  return 0
}
ns_dev() {  # nqn -> /dev/nvmeXnY (native multipath head; first namespace)
  local nqn=$1 s d
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
    d=$(ls "$s" | grep -E '^nvme[0-9]+n[0-9]+$' | sort -V | head -1)
    [ -n "$d" ] && [ -b "/dev/$d" ] && { echo "/dev/$d"; return 0; }
  done
  return 1
}
ctrl_dev() {  # nqn -> /dev/nvmeX (a live controller)
  local nqn=$1 c
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
    [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
    echo "/dev/$(basename "$c")"; return 0
  done
  return 1
}
ns_count() {  # prefix -> number of subsystems with that NQN prefix having a namespace node
  local n=0 nqn s d
  while read -r nqn s; do
    case $nqn in "$1"*) ;; *) continue ;; esac
    d=$(ls "$s" | grep -E '^nvme[0-9]+n[0-9]+$' | head -1)
    [ -n "$d" ] && [ -b "/dev/$d" ] && n=$((n + 1))
  done < <(subsys_nqns)
  echo $n
}
wait_ns_count() {  # prefix n secs
  local end=$(( $(date +%s) + $3 )) n
  while :; do
    n=$(ns_count "$1")
    [ "$n" -ge "$2" ] && { echo "  $n namespaces with NQN prefix $1"; return 0; }
    [ "$(date +%s)" -gt $end ] && { echo "  only $n of $2 namespaces appeared within $3 s"; return 1; }
    sleep 0.2
  done
}
ctrl_count() { ls /sys/class/nvme 2>/dev/null | grep -c '^nvme' ; }
wait_no_ctrls() {  # secs
  local end=$(( $(date +%s) + $1 ))
  while [ "$(ctrl_count)" != 0 ]; do
    [ "$(date +%s)" -gt $end ] && { echo "  controllers left: $(ls /sys/class/nvme | tr '\n' ' ')"; return 1; }
    sleep 0.2
  done
  return 0
}
disc_nqns() {  # nvme discover args... -> subnqn lines (raw output kept in /tmp/discover.out)
  timeout 60 nvme discover "$@" > /tmp/discover.out 2>&1
  local rc=$?
  awk '$1 == "subnqn:" {print $2}' /tmp/discover.out
  return $rc
}
nvme_connect_find() {  # nqn, nvme-connect args...
  local nqn=$1 i; shift
  DEV=; CTRL=
  modprobe nvme-fabrics
  x timeout 60 nvme connect -n "$nqn" "$@" || return 1
  for i in $(seq 1 150); do   # no udev in the guest: wait for sysfs + devtmpfs node
    DEV=$(ns_dev "$nqn") && break
    sleep 0.1
  done
  [ -n "$DEV" ] || { echo "no namespace block device for $nqn"; return 1; }
  CTRL=$(ctrl_dev "$nqn")
  echo "connected: namespace $DEV, controller $CTRL"
}
blk_bytes() { echo $(( $(cat "/sys/class/block/$(basename "$1")/size") * 512 )); }
to_bytes() {  # 1G / 512M / 4096 / 1GiB -> bytes
  local v=${1%iB}; v=${v%B}
  case $v in
    *[kK]) echo $(( ${v%?} * 1024 )) ;;
    *M) echo $(( ${v%?} * 1024 * 1024 )) ;;
    *G) echo $(( ${v%?} * 1024 * 1024 * 1024 )) ;;
    *T) echo $(( ${v%?} * 1024 * 1024 * 1024 * 1024 )) ;;
    *) echo "$v" ;;
  esac
}
fio_verify() {  # label bs numjobs iodepth mib-per-device dev... (FIO_RW=write: sequential)
  local label=$1 bs=$2 nj=$3 qd=$4 mib=$5 d i=0 rc; shift 5
  local per=$(( mib / nj ))
  local jf=/tmp/fio-$label.fio out=/tmp/fio-$label.out
  {
    echo "[global]"
    echo "ioengine=libaio"; echo "direct=1"; echo "rw=${FIO_RW:-randwrite}"; echo "bs=$bs"; echo "iodepth=$qd"
    echo "numjobs=$nj"; echo "size=${per}m"; echo "offset_increment=${per}m"
    echo "verify=crc32c"; echo "do_verify=1"; echo "verify_fatal=1"; echo "verify_dump=0"
    echo "group_reporting=1"; echo "randrepeat=0"
    for d in "$@"; do echo "[$label-$i]"; echo "filename=$d"; i=$((i + 1)); done
  } > "$jf"
  echo "+ fio $label: ${FIO_RW:-randwrite}+verify crc32c bs=$bs numjobs=$nj iodepth=$qd ${mib}MiB/device on $*"
  timeout "${FIO_TIMEOUT:-600}" fio --output-format=normal "$jf" > "$out" 2>&1; rc=$?
  grep -E '^ +(write|read):' "$out" | sed "s/^ */  [$label] /"
  if [ $rc != 0 ] || grep -qiE 'verify:|bad magic|bad header|crc32c.*(mismatch|wanted)|err= *[1-9]' "$out"; then
    echo "fio $label: exit status $rc; errors (full output: $out):"
    echo "  $(grep -o 'verify: ' "$out" | wc -l) verify error messages; first ones:"
    grep -iE 'verify|bad magic|wanted|err=|error' "$out" | head -8
    grep -E '^ +issued rwts|^ +(READ|WRITE):' "$out"
    return 1
  fi
  # make sure the verify phase really read everything back
  grep -qE '^ +read:' "$out" || { echo "fio $label: no read (verify) phase in output"; tail -30 "$out"; return 1; }
  return 0
}

# ------------------------------------------------------------------ kernel target (nvmet)
nvmet_port() {  # portid trtype traddr trsvcid
  local p=$CFG/ports/$1
  modprobe nvmet && modprobe "nvmet-$2" || return 1
  [ -d "$p" ] && return 0
  mkdir "$p" || return 1
  echo "$2" > "$p/addr_trtype"; echo ipv4 > "$p/addr_adrfam"
  echo "$3" > "$p/addr_traddr"; echo "$4" > "$p/addr_trsvcid"
}
nvmet_subsys() {  # nqn blockdev [allowed-hostnqn|any]
  local s=$CFG/subsystems/$1 h=${3:-any}
  modprobe nvmet || return 1
  mkdir -p "$s/namespaces/1" || return 1
  if [ "$h" = any ]; then
    echo 1 > "$s/attr_allow_any_host"
  else
    echo 0 > "$s/attr_allow_any_host"
    mkdir -p "$CFG/hosts/$h" && ln -sf "$CFG/hosts/$h" "$s/allowed_hosts/$h" || return 1
  fi
  echo "$2" > "$s/namespaces/1/device_path"
  echo 1 > "$s/namespaces/1/enable"
}
nvmet_link() { ln -s "$CFG/subsystems/$1" "$CFG/ports/$2/subsystems/$1"; }
nvmet_unlink() { rm -f "$CFG/ports/$2/subsystems/$1"; }
nvmet_subsys_del() {  # nqn (must be unlinked from ports)
  local s=$CFG/subsystems/$1 h
  [ -d "$s" ] || return 0
  for h in "$s"/allowed_hosts/*; do [ -L "$h" ] && rm -f "$h"; done
  echo 0 > "$s/namespaces/1/enable" 2>/dev/null
  rmdir "$s/namespaces/1" && rmdir "$s"
}
nvmet_clear() {  # remove every port, subsystem and host
  local p l s h
  for p in "$CFG"/ports/*; do
    [ -d "$p" ] || continue
    for l in "$p"/subsystems/*; do [ -L "$l" ] && rm -f "$l"; done
    rmdir "$p"
  done
  for s in "$CFG"/subsystems/*; do [ -d "$s" ] && nvmet_subsys_del "$(basename "$s")"; done
  for h in "$CFG"/hosts/*; do [ -d "$h" ] && rmdir "$h"; done
  return 0
}
nvmet_export() {  # nqn blockdev-or-file trtype traddr trsvcid portid
  nvmet_port "$6" "$3" "$4" "$5" && nvmet_subsys "$1" "$2" any && nvmet_link "$1" "$6" || return 1
  echo "nvmet: exported $2 as $1 on $3 $4:$5 (port $6)"
}
nvmet_unexport() {  # nqn portid
  nvmet_unlink "$1" "$2"; rmdir "$CFG/ports/$2" 2>/dev/null; nvmet_subsys_del "$1"
}

# ------------------------------------------------------------------ RDMA (Soft-RoCE)
rxe_pair_setup() {
  local i
  modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || return 1
  ip link add veth0 type veth peer name veth1 || return 1
  ip addr add $RXE_IP0/24 dev veth0; ip addr add $RXE_IP1/24 dev veth1
  ip link set veth0 up; ip link set veth1 up
  for i in all veth0 veth1; do
    sysctl -qw net.ipv4.conf.$i.rp_filter=0 net.ipv4.conf.$i.accept_local=1
  done
  for i in veth0 veth1; do sysctl -qw net.ipv4.conf.$i.arp_ignore=1 net.ipv4.conf.$i.arp_announce=2; done
  # locally generated packets to the "other" IP go out of the veth; 'local' table moved after
  ip rule add pref 10 iif lo to $RXE_IP1 lookup 100
  ip rule add pref 11 iif lo to $RXE_IP0 lookup 101
  ip route add $RXE_IP1 dev veth0 src $RXE_IP0 table 100
  ip route add $RXE_IP0 dev veth1 src $RXE_IP1 table 101
  ip rule add pref 100 lookup local
  ip rule del pref 0 lookup local
  rdma link add rxe0 type rxe netdev veth0 || return 1
  rdma link add rxe1 type rxe netdev veth1 || return 1
  echo "rxe: rxe0 on veth0 ($RXE_IP0) <-> rxe1 on veth1 ($RXE_IP1)"
}
veth_bytes() { awk -v d="$1:" '$1==d{print $2+$10}' /proc/net/dev; }   # rx+tx bytes

# ------------------------------------------------------------------ data dir
# ext4 on a loop device over a sparse file in a dedicated tmpfs: supports O_DIRECT and
# fallocate without using RAM for unwritten space (6.1 tmpfs has no O_DIRECT, and
# fallocate on tmpfs really allocates memory).  DATA_FS=tmpfs mounts a plain tmpfs.
data_dir_setup() {  # dir
  local dir=$1 L
  mkdir -p "$dir" /vmh-backing
  if [ "${DATA_FS:-ext4}" = tmpfs ]; then mount -t tmpfs -o size=90% tmpfs "$dir"; return; fi
  mount -t tmpfs -o size=90% tmpfs /vmh-backing || return 1
  truncate -s 256G /vmh-backing/data.img || return 1
  modprobe loop; modprobe ext4
  L=$(losetup -f) && losetup "$L" /vmh-backing/data.img || return 1
  mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$L" || return 1
  mount -o noatime "$L" "$dir" || return 1
  echo "data dir $dir: ext4 on $L (sparse 256G file in tmpfs)"
}
