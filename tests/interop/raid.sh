#!/bin/bash
# raid.sh - guest script (stage interop-raid): fabrikd's protected volumes under the Linux
# kernel NVMe/TCP host, and Linux md beside them.
#   tests/run interop-raid     (or by hand:)
#   EXTRA_PKGS=mdadm EXTRA_MODULES="raid456 md-mod" FABRIK_INTEROP_CACHE=~/.cache/fabrik-interop-raid tests/interop/vm.sh prepare
#   mkdir -p x/bin x/out && cp build/release/fabrikd build/release/fabrik x/bin/
#   EXTRA_PKGS=... EXTRA_MODULES=... FABRIK_INTEROP_CACHE=... SHARE_DIR=x tests/interop/vm.sh run tests/interop/raid.sh [SKIP=...]
# fabrikd serves 19 file drives (DRIVE_SIZE, ext4 in the guest) on tcp 127.0.0.1:4420; the
# volumes are made with the fabrik CLI over fabrikd's local socket:
#   r5: raid5 over 00-04 (64 KiB strips), spare 05;  r6: raid6 over 06-11, spares 12 and 13.
# Steps (SKIP keys): volumes, failures (fio verify, 4k random and 1M sequential, several jobs,
# on both while one member of r5 and two of r6 fail; the spares rebuilt while fio goes on),
# scrub (clean after all that), kill9 (r5 degraded, fabrikd killed with kill -9 during 4 KiB
# writes to parts of stripes and restarted: every acknowledged write reads back, and so do the
# strips no write touched, the lost member's rebuilt from parity those writes changed, before
# and after a spare is rebuilt; the scrub is clean), md (fio against an md
# RAID 5 over five more of fabrikd's drives, connected as r5 is, alternated with r5: ratios
# printed, not asserted under TCG).
# Args: DRIVE_SIZE=256M FIO_MIB=32 RUST_LOG=info MD_ROUNDS=2.  Exit status = failed steps.
set -u
. /vmh/lib.sh
args_to_env "$@"
T_SUITE="fabrikd volumes (RAID) vs the kernel nvme-tcp host, and md"
TRADDR=127.0.0.1 TRSVCID=4420
DRIVE_SIZE=${DRIVE_SIZE:-256M}
FIO_MIB=${FIO_MIB:-32}
DATA=/data/fabrik
LOGF=/tmp/fabrikd.log
export RUST_LOG=${RUST_LOG:-info} RUST_BACKTRACE=1 NO_COLOR=1 FABRIK_DATA_DIR=$DATA
FABRIKD=${FABRIKD:-$(command -v fabrikd)}
FABRIK=${FABRIK:-$(command -v fabrik)}
for b in "$FABRIKD" "$FABRIK"; do
  [ -n "$b" ] && [ -x "$b" ] || { echo "FAIL: fabrikd and fabrik must be in the guest (PATH=$PATH)"; echo "0 passed, 1 failed"; exit 1; }
done
OUT=; if grep -q ' /share 9p ' /proc/mounts; then OUT=/share/out; mkdir -p $OUT; fi
skip() { case " ${SKIP:-} " in *" $1 "*) echo "(skipping $1)"; return 0 ;; esac; return 1; }
fabrikd_log() { echo "---- fabrikd log (last 40 lines)"; tail -40 $LOGF | sed 's/^/  fabrikd: /'; }
ON_FAIL=fabrikd_log

data_dir_setup /data || { echo "FAIL: data dir setup"; exit 1; }
# 6.1's nvme-tcp sends a bio's multi-page bvec as one fragment; where it spans two transparent
# huge pages of fio's 1 MiB buffers, the receiving side's copy to fabrikd trips the kernel's
# usercopy hardening ("Kernel memory exposure attempt detected from page alloc", a BUG that
# kills fabrikd's reactor thread: seen here). Fixed upstream (sendpages_ok); not our code.
echo never > /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
mkdir -p $DATA
modprobe nvme-tcp
FPID=
target_start() {
  local i
  echo "===== fabrikd start $(date +%T) =====" >> $LOGF
  local cmd=("$FABRIKD" --data-dir $DATA --listen "$TRADDR:$TRSVCID" --drives 19 --drive-size "$DRIVE_SIZE"
             --backend file --metrics off)
  echo "+ ${cmd[*]} >> $LOGF 2>&1 &"
  "${cmd[@]}" >> $LOGF 2>&1 &
  FPID=$!
  for i in $(seq 1 600); do
    (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null && break
    kill -0 $FPID 2>/dev/null || { wait $FPID; echo "  fabrikd exited with status $? before listening"; FPID=; return 1; }
    sleep 0.1
  done
  wait_port $TRADDR $TRSVCID 1
}
vol() { "$FABRIK" volumes "$@"; }
vol_json() { "$FABRIK" volumes --json show "$1"; }
vol_field() {  # volume field: a top-level string or number of the volume's JSON
  vol_json "$1" | tr -d '\n ' | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}
wait_state() {  # volume state secs
  local end=$(( $(date +%s) + $3 )) s
  while :; do
    s=$(vol_field "$1" state)
    [ "$s" = "$2" ] && return 0
    [ "$(date +%s)" -ge "$end" ] && { echo "  $1 is $s, not $2, after $3 s"; vol show "$1"; return 1; }
    sleep 1
  done
}
NQN5= NQN6= DEV5= DEV6=

s_volumes() {
  x vol create r5 --level raid5 --drives 00,01,02,03,04 --spares 05 || return 1
  x vol create r6 --level raid6 --drives 06,07,08,09,10,11 --spares 12,13 || return 1
  vol list > /tmp/vol.list; cat /tmp/vol.list
  assert "fabrik volumes list shows r5 (raid5) and r6 (raid6)" \
    eval 'grep -q "^r5 *raid5 " /tmp/vol.list && grep -q "^r6 *raid6 " /tmp/vol.list' || return 1
  NQN5=$(vol_field r5 nqn) NQN6=$(vol_field r6 nqn)
  assert "r5 is optimal" [ "$(vol_field r5 state)" = optimal ] || return 1
  disc_nqns -t tcp -a $TRADDR -s $TRSVCID > /tmp/disc.nqns
  assert "nvme discover lists both volumes" eval 'grep -qx "$NQN5" /tmp/disc.nqns && grep -qx "$NQN6" /tmp/disc.nqns' || return 1
  assert "a member drive is no longer exported alone, a free one is" \
    eval '! grep -q ":drive-03$" /tmp/disc.nqns && grep -q ":drive-14$" /tmp/disc.nqns' || return 1
  local args=(-t tcp -a $TRADDR -s $TRSVCID --reconnect-delay=1 --ctrl-loss-tmo=300)
  nvme_connect_find "$NQN5" "${args[@]}" && DEV5=$DEV || return 1
  nvme_connect_find "$NQN6" "${args[@]}" && DEV6=$DEV || return 1
  assert "the kernel sees r5's size" [ "$(blk_bytes $DEV5)" = "$(vol_field r5 capacity_bytes)" ] || return 1
  assert "the kernel sees r6's size" [ "$(blk_bytes $DEV6)" = "$(vol_field r6 capacity_bytes)" ]
}

fio_bg() {  # label rc-file fio_verify-args...: fio_verify in the background
  local label=$1 rcf=$2; shift 2
  ( fio_verify "$label" "$@" > /tmp/fio-bg-$label.log 2>&1; echo $? > "$rcf" ) &
}
fio_wait() {  # label rc-file
  local i
  for i in $(seq 1 900); do [ -s "$2" ] && break; sleep 1; done
  sed 's/^/  /' /tmp/fio-bg-$1.log
  assert "fio $1: zero errors" [ "$(cat "$2" 2>/dev/null)" = 0 ]
}

s_failures() {
  local ok=0 saw=
  blocks_write "$DEV5" r5 600 16 && blocks_write "$DEV6" r6 600 16 || return 1
  # Slow rebuilds, so that fio runs across them.
  x vol rebuild-limit r5 4 && x vol rebuild-limit r6 4 || return 1
  rm -f /tmp/f*.rc
  fio_bg r5-4k /tmp/f5a.rc 4k 2 8 "$FIO_MIB" "$DEV5"
  fio_bg r6-4k /tmp/f6a.rc 4k 2 8 "$FIO_MIB" "$DEV6"
  sleep 4
  x vol fail r5 01 || ok=1
  x vol fail r6 07 || ok=1
  sleep 2
  x vol fail r6 09 || ok=1
  vol show r5; vol show r6
  saw="$(vol_field r5 state) $(vol_field r6 state)"
  fio_wait r5-4k /tmp/f5a.rc || ok=1
  fio_wait r6-4k /tmp/f6a.rc || ok=1
  assert "both volumes were rebuilding onto their spares during fio (saw: $saw)" [ "$saw" = "rebuilding rebuilding" ] || ok=1
  # 1M sequential, several jobs, while the rebuilds still run.
  FIO_RW=write fio_bg r5-1m /tmp/f5b.rc 1M 2 4 "$FIO_MIB" "$DEV5"
  FIO_RW=write fio_bg r6-1m /tmp/f6b.rc 1M 2 4 "$FIO_MIB" "$DEV6"
  fio_wait r5-1m /tmp/f5b.rc || ok=1
  fio_wait r6-1m /tmp/f6b.rc || ok=1
  vol show r5; vol show r6
  x vol rebuild-limit r5 && x vol rebuild-limit r6 || ok=1
  wait_state r5 optimal 600 || ok=1
  wait_state r6 optimal 900 || ok=1
  vol show r5; vol show r6
  assert "r5: the spare took 01's place" eval 'vol_json r5 | tr -d " \n" | grep -q "{\"drive\":\"05\",\"state\":\"active\"}"' || ok=1
  assert "r6: both spares took their places" eval 'vol_json r6 | tr -d " \n" | grep -q "\"12\",\"state\":\"active\"" && vol_json r6 | tr -d " \n" | grep -q "\"13\",\"state\":\"active\""' || ok=1
  # What was written before the failures reads back through the rebuilt members.
  blocks_check "$DEV5" r5 600 16 || ok=1
  blocks_check "$DEV6" r6 600 16 || ok=1
  return $ok
}
scrub_clean() {  # volume
  x vol scrub "$1" || return 1
  local i s
  for i in $(seq 1 600); do
    s=$(vol_json "$1" | tr -d ' \n' | grep -o '"scrub":{"state":"[a-z]*"' | cut -d'"' -f6)
    [ -n "$s" ] && [ "$s" != running ] && break
    sleep 1
  done
  vol show "$1"
  assert "$1: the scrub is clean (found $s)" [ "$s" = clean ]
}
s_scrub() {
  local ok=0
  scrub_clean r5 || ok=1
  scrub_clean r6 || ok=1
  return $ok
}

# 1 MiB that only block $1 of $2 holds, in a file: dd reading a pipe writes what one read got
# (a pipe gives at most 64 KiB), so a block written from a pipe is mostly the old data.
block() { local f=/tmp/blk-$2-$1; [ -s "$f" ] || yes "$2-block-$1-" | head -c 1048576 > "$f"; echo "$f"; }
blocks_write() {  # dev tag first-MiB count
  local i
  for i in $(seq 0 $(($4 - 1))); do
    dd if="$(block "$i" "$2")" of="$1" bs=1M seek=$(($3 + i)) count=1 oflag=direct conv=notrunc status=none || return 1
  done
}
blocks_check() {  # dev tag first-MiB count
  local i bad=0
  for i in $(seq 0 $(($4 - 1))); do
    cmp -s <(dd if="$1" bs=1M skip=$(($3 + i)) count=1 iflag=direct status=none) "$(block "$i" "$2")" || bad=$((bad + 1))
  done
  assert "$2: the $4 MiB written before read back intact ($bad differ)" [ $bad = 0 ]
}
# After the kill: the 8 MiB read back equal what was written before the failure with every
# acknowledged 4 KiB write laid over it (the writer finishes after the restart, so all are):
# the strips no write touched among them, the lost member's rebuilt from parity the writes
# changed.
kill9_check() {  # what
  local s k want=/tmp/kill9-want
  cp /tmp/kill9-ref $want
  while read -r s k; do
    dd if="$(piece "$s" "$k")" of=$want bs=4096 seek=$(( (s * STRIPE5 + k * 4096) / 4096 )) conv=notrunc status=none
  done < /tmp/acked
  assert "$1: the acknowledged writes and every strip around them read back" \
    cmp <(dd if="$DEV5" bs=1M skip=100 count=$((KILL9_STRIPES * STRIPE5 >> 20)) iflag=direct status=none) $want
}
STRIP5=65536 STRIPE5=262144 KILL9_STRIPES=32
piece() { local f=/tmp/piece-$1-$2; [ -s "$f" ] || yes "kill9-$1-$2-" | head -c 4096 > "$f"; echo "$f"; }
s_kill9() {
  local i s k rc=0 ref=/tmp/kill9-ref
  : > /tmp/acked
  # 8 MiB written while healthy (whole stripes): what the member about to fail holds there
  # lives only in parity afterwards.
  head -c $((KILL9_STRIPES * STRIPE5)) /dev/urandom > $ref
  x dd if=$ref of="$DEV5" bs=1M seek=100 oflag=direct conv=notrunc status=none || return 1
  x vol fail r5 03 || return 1
  # Degraded, 4 KiB writes into strip 0 of each stripe: parts of stripes, each changing the
  # parity that the lost strips of its rows are rebuilt from. A kill between a write's data and
  # its parity would tear them; the log of degraded writes makes the parity again at the
  # restart. (Where the kill lands is chance here, and records of finished writes are replayed
  # too: the torn write itself is raid/tests.rs's, which tears one on purpose.)
  (
    for k in $(seq 0 3); do
      for s in $(seq 0 $((KILL9_STRIPES - 1))); do
        dd if="$(piece "$s" "$k")" of="$DEV5" bs=4096 seek=$(( ((100 << 20) + s * STRIPE5 + k * 4096) / 4096 )) \
          count=1 oflag=direct conv=notrunc status=none || exit 1
        echo "$s $k" >> /tmp/acked
      done
    done
  ) & local writer=$!
  for i in $(seq 1 300); do [ "$(wc -l < /tmp/acked)" -ge 40 ] && break; sleep 0.2; done
  echo "  kill -9 fabrikd (pid $FPID) after $(wc -l < /tmp/acked) acknowledged writes"
  kill -9 "$FPID"; wait "$FPID" 2>/dev/null
  sleep 1
  target_start || return 1
  for i in $(seq 1 600); do kill -0 $writer 2>/dev/null || break; sleep 0.5; done
  wait $writer; rc=$?
  assert "the writer finished after the restart (status $rc, $(wc -l < /tmp/acked) of $((4 * KILL9_STRIPES)) writes acknowledged)" [ $rc = 0 ] || return 1
  grep -i resync $LOGF | tail -3 | sed 's/^/  fabrikd: /'
  grep -i "replayed" $LOGF | tail -2 | sed 's/^/  fabrikd: /'
  kill9_check "degraded, after the restart" || return 1
  assert "r5 came back degraded, nothing left unsynced" eval '[ "$(vol_field r5 state)" = degraded ] && [ "$(vol_field r5 unsynced_regions)" = 0 ]' || return 1
  # The drive that left r5 at the first failure comes back as a spare: rebuilt onto, then clean.
  x vol spare r5 01 || return 1
  wait_state r5 optimal 600 || return 1
  kill9_check "rebuilt" || return 1
  scrub_clean r5
}

fio_rate() {  # dev rw bs qd secs -> MB/s (bw of the run)
  local out=/tmp/fio-rate.out
  fio --name=rate --filename="$1" --ioengine=libaio --direct=1 --rw="$2" --bs="$3" --iodepth="$4" \
    --runtime="$5" --time_based=1 --size=128m --numjobs=1 --group_reporting=1 --output-format=terse \
    --terse-version=3 > $out 2>/dev/null || { echo 0; return; }
  # terse v3: field 7 = read KiB/s, field 48 = write KiB/s
  awk -F';' -v rw="$2" '{ v = (rw ~ /write/) ? $48 : $7; printf "%.1f\n", v / 1024 }' $out
}
s_md() {  # md RAID 5 over five of fabrikd's plain drives, through NVMe/TCP as r5 is
  local i d devs=() r w5 wm r5 rm
  modprobe raid456 || return 1
  disc_nqns -t tcp -a $TRADDR -s $TRSVCID > /tmp/disc-md.nqns
  for i in 14 15 16 17 18; do
    local nqn; nqn=$(grep ":drive-$i\$" /tmp/disc-md.nqns)
    [ -n "$nqn" ] || { echo "  drive $i is not in the discovery log:"; cat /tmp/discover.out; return 1; }
    nvme_connect_find "$nqn" -t tcp -a $TRADDR -s $TRSVCID || return 1
    devs+=("$DEV")
  done
  x mdadm --create /dev/md0 --run --level=5 --raid-devices=5 --chunk=64 --assume-clean "${devs[@]}" || return 1
  echo "  md RAID 5 over fabrikd's drives 14-18 (${devs[*]}: the same file drives, NVMe/TCP as r5), 64 KiB chunks"
  local wr=() rr=()
  for r in $(seq 1 "${MD_ROUNDS:-2}"); do
    w5=$(fio_rate "$DEV5" write 1M 8 8); wm=$(fio_rate /dev/md0 write 1M 8 8)
    r5=$(fio_rate "$DEV5" randread 4k 32 8); rm=$(fio_rate /dev/md0 randread 4k 32 8)
    echo "  round $r: 1M write MB/s fabrikd r5 $w5, md $wm; 4k randread MB/s fabrikd r5 $r5, md $rm"
    wr+=("$(awk -v a="$w5" -v b="$wm" 'BEGIN{print (b > 0) ? a / b : 0}')")
    rr+=("$(awk -v a="$r5" -v b="$rm" 'BEGIN{print (b > 0) ? a / b : 0}')")
  done
  echo "  fabrikd r5 / md RAID 5 (TCG guest, both over NVMe/TCP to the same fabrikd): 1M write ${wr[*]}, 4k randread ${rr[*]}"
  mdadm --stop /dev/md0 >/dev/null 2>&1
  return 0
}
s_log() {
  local n_err
  n_err=$(grep -cE '\bERROR\b' $LOGF)
  echo "  fabrikd log: $(wc -l < $LOGF) lines, $n_err ERROR"
  grep -E '\b(ERROR|WARN)\b' $LOGF | cut -c1-200 | head -20 | sed 's/^/  fabrikd: /'
  assert "fabrikd never panicked" [ "$(grep -c 'panicked' $LOGF)" = 0 ]
}

echo "raid: kernel $(uname -r), fabrikd $FABRIKD"
step "fabrikd: 19 file drives of $DRIVE_SIZE, tcp $TRADDR:$TRSVCID" target_start
[ "$T_FAILED" = 0 ] || { fabrikd_log; t_summary; exit 1; }
skip volumes || step "volumes: r5 (raid5, 5 + spare) and r6 (raid6, 6 + 2 spares) made, discovered, connected" s_volumes
if [ -n "$DEV5" ] && [ -n "$DEV6" ]; then
  skip failures || step "fio verify on both while r5 loses one member and r6 two; spares rebuilt under fio" s_failures
  skip scrub || step "scrub r5 and r6: clean" s_scrub
  skip kill9 || step "kill -9 of fabrikd during part-stripe writes to a degraded r5: acknowledged writes and untouched strips intact, rebuilt, scrub clean" s_kill9
  skip md || step "md RAID 5 (4+1) beside r5: fio 1M write and 4k randread, alternated" s_md
fi
step "fabrikd log: no panic" s_log
nvme disconnect-all >/dev/null 2>&1
[ -n "$FPID" ] && kill "$FPID" 2>/dev/null && wait "$FPID" 2>/dev/null
if [ -n "$OUT" ]; then cp $LOGF $OUT/raid-fabrikd.log; dmesg > $OUT/raid-dmesg.txt; fi
t_summary
