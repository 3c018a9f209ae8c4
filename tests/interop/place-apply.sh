#!/bin/bash
# place-apply.sh - guest script: `fabrik place --apply` against fabrikd and the kernel's nvme-tcp
# host. fabrikd listens on veth1 (10.99.0.2) and serves its REST API on 127.0.0.1:8080; free
# drives admit only another host NQN, so what this host reaches it owes to the composition.
# The plan, made on the fixture machine `guest_veth` (one GPU, one RDMA port whose net device is
# veth0 = 10.99.0.1) with the box's ports and drives from the API, must compose the drives to
# this host, make the kernel connect every drive through veth0, and the data must cross veth0;
# the other host is refused by the API and by fabrikd; fabrik's userspace sessions read every
# drive as this host.
#   tests/run build interop-place     (or by hand:)
#   mkdir -p x/bin && cp build/release/fabrik build/release/fabrikd x/bin/
#   FABRIK_FIXTURE_EXPORT=$PWD/x/fixture.tar cargo test -p fabrik-initiator --test cli_place guest_fixture
#   SHARE_DIR=x tests/interop/vm.sh run tests/interop/place-apply.sh
set -u
. /vmh/lib.sh
args_to_env "$@"
export NO_COLOR=1
T_SUITE="fabrik place --apply (REST compose) vs kernel nvme-tcp"
NDRIVES=4
BOX=10.99.0.2
API=http://127.0.0.1:8080
PREFIX=nqn.2024-01.io.fabrik:interop:drive-
FIXTURE=${FIXTURE:-$(ls /share/fixture.tar /extra/fixture.tar 2>/dev/null | head -1)}
OUTD=/share/out
fail_early() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
command -v fabrik >/dev/null && command -v fabrikd >/dev/null || fail_early "fabrik and fabrikd must be in bin/"
[ -n "$FIXTURE" ] || fail_early "no fixture.tar (see the header)"
rxe_pair_setup || echo "rxe setup failed (continuing: only the veth pair matters here)"
mkdir -p /tmp/fx && tar -xf "$FIXTURE" -C /tmp/fx || fail_early "fixture.tar"
mkdir -p /data && mount -t tmpfs tmpfs /data
ME=$(cat /etc/nvme/hostnqn)
OU=$(cat /proc/sys/kernel/random/uuid)
OTHER=nqn.2014-08.org.nvmexpress:uuid:$OU
fabrikd --data-dir /data/f --listen $BOX:4420 --drives $NDRIVES --drive-size 64M --backend ram \
  --box-name interop --host "$OTHER" > /tmp/fabrikd.log 2>&1 &
FPID=$!
wait_port $BOX 4420 60 && wait_port 127.0.0.1 8080 30 || { cat /tmp/fabrikd.log; fail_early "fabrikd not up"; }
export FABRIK_DATA_DIR=/data/f   # the API token file
modprobe nvme-tcp
PLACE=(fabrik place --sysfs-root /tmp/fx --api "$API" --apply)

own_sysfs() {
  x fabrik topo; local rc=$?
  assert "fabrik topo on the guest's /sys exits 0" [ $rc = 0 ] || return 1
  fabrik place > /tmp/p.out 2>&1; rc=$?; cat /tmp/p.out
  assert "fabrik place exits 0" [ $rc = 0 ] || return 1
  assert "says there is no GPU" grep -q "no GPU found under /sys: nothing to place" /tmp/p.out
}
dry_run() {
  x "${PLACE[@]}" --dry-run -q "$ME" > /tmp/d.out 2>&1; local rc=$?; cat /tmp/d.out
  assert "the dry run exits 0" [ $rc = 0 ] || return 1
  assert "it prints the composition request for this host" \
    grep -qF "would compose: POST $API/api/v1/compositions {\"host_nqn\":\"$ME\"" /tmp/d.out || return 1
  assert "and $NDRIVES nvme connect commands through veth0" \
    [ "$(grep -c "^nvme connect .*--host-traddr 10.99.0.1 --host-iface veth0 --hostnqn $ME$" /tmp/d.out)" = $NDRIVES ] || return 1
  assert "no composition made" [ "$(fabrik compositions --api $API --json | tr -d ' \n')" = "[]" ] || return 1
  assert "no controller made" [ "$(ctrl_count)" = 0 ]
}
refusals() { grep -c "connect refused: host not allowed" /tmp/fabrikd.log; }
not_yet() {
  local refused; refused=$(refusals)
  x timeout 60 nvme connect -t tcp -a $BOX -s 4420 -n ${PREFIX}00 --hostnqn="$ME" --ctrl-loss-tmo=1; local rc=$?
  assert "before the composition this host cannot connect (free drives admit only $OTHER)" [ $rc != 0 ] \
    || { nvme disconnect-all; return 1; }
  assert "fabrikd refused it (host not allowed)" [ "$(refusals)" -gt "$refused" ]
}
apply() {
  x "${PLACE[@]}" -q "$ME" > /tmp/a.out 2>&1; local rc=$?; cat /tmp/a.out
  assert "fabrik place --apply exits 0" [ $rc = 0 ] || return 1
  assert "it composed $NDRIVES drives to this host" grep -q "composed $NDRIVES drive(s) to $ME: composition" /tmp/a.out || return 1
  wait_ns_count $PREFIX $NDRIVES 30 || return 1
  local c n=0
  for c in /sys/class/nvme/nvme*; do
    echo "  $(basename $c): $(cat $c/transport) $(cat $c/address) $(cat $c/subsysnqn)"
    grep -q "host_traddr=10.99.0.1,host_iface=veth0" $c/address && n=$((n+1))
  done
  assert "$NDRIVES controllers bound to veth0 / 10.99.0.1" [ $n = $NDRIVES ]
}
other_refused() {
  x "${PLACE[@]}" -q "$OTHER" > /tmp/o.out 2>&1; local rc=$?; cat /tmp/o.out
  assert "fabrik place --apply for another host fails" [ $rc != 0 ] || return 1
  assert "with the API's problem (409, composed to this host)" \
    grep -q "the box's API refused the composition: 409.*is composed to $ME" /tmp/o.out || return 1
  assert "and nothing connected for it" [ "$(ctrl_count)" = $NDRIVES ]
}
# After this host's sessions are gone (nvme-cli 2.3 answers "already connected" itself while
# this host holds the subsystem, whatever --hostnqn says), the other host's kernel connect
# reaches fabrikd, which refuses it.
other_kernel_refused() {
  x timeout 60 nvme disconnect-all
  assert "this host's controllers are gone" wait_no_ctrls 30 || return 1
  local rc refused; refused=$(refusals)
  x timeout 60 nvme connect -t tcp -a $BOX -s 4420 -n ${PREFIX}01 --hostnqn="$OTHER" --hostid="$OU" \
    --ctrl-loss-tmo=1; rc=$?
  assert "the other host's kernel connect fails" [ $rc != 0 ] || { nvme disconnect-all; return 1; }
  assert "fabrikd refused it (host not allowed)" [ "$(refusals)" -gt "$refused" ] || return 1
  assert "no controller made" [ "$(ctrl_count)" = 0 ]
}
io_over_veth0() {
  local before after d
  before=$(veth_bytes veth0)
  for d in /dev/nvme*n1; do dd if=$d of=/dev/null bs=1M count=8 iflag=direct 2>/dev/null || return 1; done
  after=$(veth_bytes veth0)
  echo "  veth0 bytes: $before -> $after"
  assert "32 MiB read crossed veth0" [ $((after - before)) -gt 33554432 ]
}
topo_sees_fabrics() {
  fabrik topo --json > /tmp/t.json || return 1
  assert "topo --json lists the $NDRIVES NVMe/TCP controllers with host_iface veth0" \
    [ "$(grep -c '"host_iface": "veth0"' /tmp/t.json)" = $NDRIVES ]
}
userspace() {
  x "${PLACE[@]}" --no-compose --userspace -q "$ME" > /tmp/u.out 2>&1; local rc=$?; cat /tmp/u.out
  assert "userspace sessions as this host exit 0" [ $rc = 0 ] || return 1
  assert "each of the $NDRIVES drives read a block" \
    [ "$(grep -c "^connected (userspace) tcp $BOX:4420 ${PREFIX}.* as $ME: read 4096 bytes of namespace 1" /tmp/u.out)" = $NDRIVES ] || return 1
  x "${PLACE[@]}" --no-compose --userspace -q "$OTHER" > /tmp/u2.out 2>&1; rc=$?; cat /tmp/u2.out
  assert "the other host's userspace sessions are refused" [ $rc != 0 ] || return 1
  assert "for all $NDRIVES drives" [ "$(grep -c "^failed (userspace)" /tmp/u2.out)" = $NDRIVES ]
}
step "fabrik topo/place on the guest's own sysfs" own_sysfs
step "fabrik place --apply --dry-run changes nothing" dry_run
step "this host cannot connect before the composition" not_yet
step "fabrik place --apply composes through the API and connects $NDRIVES drives through veth0" apply
step "another host's fabrik place --apply is refused by the API" other_refused
step "I/O goes over veth0" io_over_veth0
step "fabrik topo sees the fabrics controllers" topo_sees_fabrics
step "fabrik place --apply --userspace reads every drive as this host only" userspace
step "another host's kernel connect is refused by fabrikd" other_kernel_refused
x timeout 60 nvme disconnect-all
kill $FPID; wait $FPID
[ -d $OUTD ] && cp /tmp/fabrikd.log $OUTD/place-fabrikd.log
t_summary
