#!/bin/bash
# fabrik-host.sh - guest script: the `fabrik` host tools against the Linux kernel target (nvmet-tcp
# on null_blk): the userspace host (`fabrik discover`, `fabrik bench --verify`, `fabrik read`)
# and kernel sessions made by `fabrik connect` / `fabrik list` / `fabrik disconnect`, with data
# crossing between the two.
#   SHARE_DIR=dir-with-bin/fabrik vm.sh run tests/interop/fabrik-host.sh [NDRIVES=2] [MIB=8]
set -u
. /vmh/lib.sh
args_to_env "$@"
T_SUITE="fabrik host tools vs kernel nvmet-tcp"
NDRIVES=${NDRIVES:-2}
MIB=${MIB:-8}
TRADDR=127.0.0.1
TRSVCID=4420
PREFIX=nqn.2024-01.io.fabrik:interop:drive-
export NO_COLOR=1
FABRIK=${FABRIK:-$(command -v fabrik)}
[ -n "$FABRIK" ] && [ -x "$FABRIK" ] || { echo "FAIL: no fabrik binary in the guest"; echo "0 passed, 1 failed"; exit 1; }
A=(-a $TRADDR -s $TRSVCID)

# No jq in the guest: the first "KEY": NUMBER of a JSON file (top-level keys come first).
jnum() { grep -o "\"$1\": *-\?[0-9.]*" "$2" | head -1 | sed 's/.*: *//'; }

# One more null_blk device than drives: the subsystem behind a referral (s_referral).
modprobe null_blk nr_devices=$((NDRIVES + 1)) gb=1 memory_backed=1 || { echo "FAIL: null_blk"; exit 1; }
nvmet_port 1 tcp $TRADDR $TRSVCID || { echo "FAIL: nvmet port"; exit 1; }
for ((i = 0; i < NDRIVES; i++)); do
  nvmet_subsys "$PREFIX$i" /dev/nullb$i any && nvmet_link "$PREFIX$i" 1 || { echo "FAIL: nvmet subsystem $i"; exit 1; }
done
wait_port $TRADDR $TRSVCID 30 || { echo "FAIL: nvmet not listening"; exit 1; }
# null_blk's logical blocks (512 bytes by default).
LBA_SHIFT=$(awk '{ n = 0; for (b = $1; b > 1; b /= 2) n++; print n }' /sys/block/nullb0/queue/logical_block_size)
modprobe nvme-fabrics; modprobe nvme-tcp

s_discover() {
  x timeout 60 "$FABRIK" discover "${A[@]}" | tee /tmp/discover.out
  assert "fabrik discover lists the $NDRIVES subsystems" [ "$(grep -c "$PREFIX" /tmp/discover.out)" = "$NDRIVES" ]
}

s_bench_verify() {
  # Striped over every subsystem of the discovery log: write all with a seed (the write run reads
  # back what it wrote), then a read run trusting that seed checks every block.
  x timeout 300 "$FABRIK" bench "${A[@]}" --all --rw write --bs 16k --iodepth 8 --threads 2 \
    --size "${MIB}m" --verify --verify-seed 1234 --json --quiet > /tmp/w.json || { cat /tmp/w.json; return 1; }
  assert "write phase: no verify errors" [ "$(jnum errors /tmp/w.json)" = 0 ] || return 1
  assert "write run checked every block" [ "$(jnum blocks_checked /tmp/w.json)" = $((MIB << 20 >> LBA_SHIFT)) ] || return 1
  assert "write phase moved $MIB MiB" [ "$(jnum bytes /tmp/w.json)" = $((MIB << 20)) ] || return 1
  x timeout 300 "$FABRIK" bench "${A[@]}" --all --rw read --bs 64k --iodepth 4 --size "${MIB}m" \
    --verify --verify-seed 1234 --no-prefill --json --quiet > /tmp/r.json || { cat /tmp/r.json; return 1; }
  echo "  read: iops $(jnum iops /tmp/r.json), bytes/s $(jnum bytes_per_sec /tmp/r.json), lat avg $(jnum avg /tmp/r.json) us"
  assert "read-back: every block checked" [ "$(jnum blocks_checked /tmp/r.json)" = $((MIB << 20 >> LBA_SHIFT)) ] || return 1
  assert "read-back: no verify errors" [ "$(jnum errors /tmp/r.json)" = 0 ] || return 1
  # Another seed must fail: the check can fail.
  ! timeout 300 "$FABRIK" bench "${A[@]}" --all --rw read --bs 64k --size 1m --verify --verify-seed 99 \
    --no-prefill --quiet > /tmp/bad.out 2>&1
  assert "a wrong seed is reported as bad blocks" grep -q "written with seed 0x4d2" /tmp/bad.out
}

s_connect_list_disconnect() {
  local nqn=${PREFIX}0 dev i
  x timeout 60 "$FABRIK" connect -t tcp "${A[@]}" -n "$nqn" -i 2 -k 5 -c 2 -l 15 --json | tee /tmp/c.json || return 1
  dev=$(grep -o '"device":"nvme[0-9]*"' /tmp/c.json | sed 's/.*:"//; s/"//')
  assert "the kernel made controller $dev" [ -e "/sys/class/nvme/$dev" ] || return 1
  assert "$dev is of $nqn" [ "$(cat /sys/class/nvme/$dev/subsysnqn)" = "$nqn" ] || return 1
  assert "nr_io_queues=2 was passed (queue_count 3)" [ "$(cat /sys/class/nvme/$dev/queue_count)" = 3 ] || return 1
  for i in $(seq 1 150); do DEV=$(ns_dev "$nqn") && break; sleep 0.1; done
  assert "a namespace block device appeared" [ -b "${DEV:-/nonexistent}" ] || return 1
  x "$FABRIK" list | tee /tmp/l.out
  assert "fabrik list shows $DEV of $nqn" grep -qE "^$DEV +1 .* $nqn\$" /tmp/l.out || return 1
  assert "fabrik list shows $dev live over tcp" grep -qE "^$dev +tcp +[0-9]+ +live .*$nqn\$" /tmp/l.out || return 1
  "$FABRIK" list --json > /tmp/l.json
  assert "fabrik list --json names $nqn" grep -q "\"subsysnqn\": \"$nqn\"" /tmp/l.json || return 1
  # Data written through the kernel session reads back the same through a userspace one.
  head -c $((1 << 20)) /dev/urandom > /tmp/kdata
  x dd if=/tmp/kdata of="$DEV" bs=64k seek=16 oflag=direct status=none || return 1
  x timeout 60 "$FABRIK" read "${A[@]}" -n "$nqn" --slba $((1048576 >> LBA_SHIFT)) -z 1m -d /tmp/udata || return 1
  assert "userspace read == kernel write" cmp /tmp/kdata /tmp/udata || return 1
  x timeout 60 "$FABRIK" disconnect -n "$nqn" || return 1
  assert "controllers gone after fabrik disconnect" wait_no_ctrls 30
}

s_errors() {
  ! "$FABRIK" connect "${A[@]}" -n nqn.2024-01.io.fabrik:interop:nonexistent > /tmp/e.out 2>&1
  cat /tmp/e.out
  assert "a refused connect says so" grep -q "the kernel refused the connect" /tmp/e.out || return 1
  ! "$FABRIK" bench "${A[@]}" -t fc -n ${PREFIX}0 > /tmp/e.out 2>&1
  assert "an unknown transport is refused clearly" grep -q "unknown transport" /tmp/e.out
}

s_referral() {
  # A second port with its own subsystem, announced on port 1 only as a referral.
  local r=$CFG/ports/1/referrals/to-port-2 referred=${PREFIX}referred
  nvmet_port 2 tcp $TRADDR 4421 || return 1
  nvmet_subsys "$referred" /dev/nullb$NDRIVES any && nvmet_link "$referred" 2 || return 1
  mkdir "$r" || return 1
  echo tcp > "$r/addr_trtype"; echo ipv4 > "$r/addr_adrfam"
  echo $TRADDR > "$r/addr_traddr"; echo 4421 > "$r/addr_trsvcid"; echo 1 > "$r/enable"
  wait_port $TRADDR 4421 30 || return 1
  x timeout 60 "$FABRIK" discover "${A[@]}" | tee /tmp/discover.out
  assert "the discovery log has the referral" grep -qE "referral .* 4421 " /tmp/discover.out || return 1
  x timeout 60 "$FABRIK" discover "${A[@]}" --json > /tmp/discover.json || return 1
  assert "discover --json names it as nvme-cli does" \
    grep -q '"subtype": "discovery subsystem referral"' /tmp/discover.json || return 1
  x timeout 300 "$FABRIK" bench "${A[@]}" --all --rw write --bs 64k --size 3m --json --quiet > /tmp/ref.json || { cat /tmp/ref.json; return 1; }
  assert "bench --all follows the referral: $((NDRIVES + 1)) drives" [ "$(jnum drives /tmp/ref.json)" = $((NDRIVES + 1)) ]
}

s_connect_all() {
  # After s_referral: port 1's log has the drives and a referral to the third subsystem.
  x timeout 120 "$FABRIK" connect-all "${A[@]}" -l 15 | tee /tmp/ca.out
  assert "a kernel controller per subsystem, the referred one too" [ "$(ctrl_count)" = $((NDRIVES + 1)) ] || return 1
  wait_ns_count "$PREFIX" $((NDRIVES + 1)) 30 || return 1
  x timeout 120 "$FABRIK" connect-all "${A[@]}" -l 15 | tee /tmp/ca2.out
  assert "connecting again adds nothing" [ "$(ctrl_count)" = $((NDRIVES + 1)) ] || return 1
  assert "and says so" grep -q "already connected" /tmp/ca2.out || return 1
  x "$FABRIK" disconnect --all || return 1
  assert "disconnect --all leaves no controller" wait_no_ctrls 30
}

step "fabrik discover" s_discover
step "fabrik bench --verify over every subsystem (userspace host)" s_bench_verify
step "fabrik connect / list / disconnect (kernel host), data crosses to the userspace host" s_connect_list_disconnect
step "clear errors" s_errors
step "fabrik bench --all follows discovery referrals" s_referral
step "fabrik connect-all / disconnect --all (kernel host, referrals followed)" s_connect_all
t_summary
