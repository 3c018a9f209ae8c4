#!/bin/bash
# tls.sh - guest script (stage interop-tls, Linux 6.12 with tlshd from Debian 13, vm.sh TLSHD=1):
# TLS 1.3 on NVMe/TCP with configured PSKs, against real peers.
#   1. keys: `nvme gen-tls-key` (nvme-cli 2.3) makes the configured PSK; `fabrik tls-identity`
#      derives each host/subsystem's identity and TLS PSK, `keyctl padd psk` puts them into the
#      kernel's .nvme keyring, where the 6.12 host and nvmet look (through tlshd).
#   2. the kernel host (nvme-tcp, `fabrik connect --tls` writes the `tls` option nvme-cli 2.3
#      lacks) against fabrikd (--tls-psk, a port that requires TLS): 1 MiB written O_DIRECT and
#      read back equal, fio crc32c verify at 4k and 128k, TLS on every queue; a host whose
#      keyring has a version 0 identity only; a SHA-384 key (`gen-tls-key --hmac=2`, AES-256-GCM);
#      the connect in clear text refused, no controller left;
#      `nvme discover` on fabrikd's "allowed" port reads sectype tls13, treq not required.
#   3. fabrik's userspace host (--tls-key) against nvmet-tcp with addr_tsas tls1.3 (tlshd its
#      server): io-check verified with a SHA-256 and a SHA-384 key; a wrong key refused.
#   4. fabrik's host against fabrikd over TLS (io-check, discover on the required port).
#   tests/run interop-tls    (or by hand:)
#   TLSHD=1 EXTRA_PKGS=keyutils KPKG=linux-image-6.12.100+deb12-amd64 \
#     FABRIK_INTEROP_CACHE=~/.cache/fabrik-interop-612-tls tests/interop/vm.sh prepare
#   mkdir -p x/bin x/out && cp build/release/fabrikd build/release/fabrik x/bin/
#   (the same variables) SHARE_DIR=x tests/interop/vm.sh run tests/interop/tls.sh
# Artifacts: /share/out/fabrikd.log, tlshd.log, dmesg.txt.  Exit status = failed steps.
set -u
. /vmh/lib.sh
args_to_env "$@"
T_SUITE="TLS 1.3 on NVMe/TCP: Linux 6.12 host and nvmet vs fabrikd and fabrik"
export NO_COLOR=1
FABRIKD=${FABRIKD:-$(command -v fabrikd)}
FABRIK=${FABRIK:-$(command -v fabrik)}
for b in "$FABRIKD" "$FABRIK"; do
  [ -n "$b" ] && [ -x "$b" ] || { echo "FAIL: fabrikd/fabrik missing in the guest"; echo "0 passed, 1 failed"; exit 1; }
done
cp "$FABRIKD" /tmp/fabrikd && FABRIKD=/tmp/fabrikd
cp "$FABRIK" /tmp/fabrik && FABRIK=/tmp/fabrik
OUT=/share/out; mkdir -p $OUT
LOGF=$OUT/fabrikd.log; : > $LOGF
TRADDR=127.0.0.1 TLS_PORT=4420 ALLOWED_PORT=4421 NVMET_PORT=4430
. /vmh/auth-fabrikd-lib.sh   # only for `api` (fabrikd's REST API over bash /dev/tcp)
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6f1e0a2c-51c4-4b4e-9d2a-7a0c3f1e2b01
HOSTNQN2=nqn.2014-08.org.nvmexpress:uuid:6f1e0a2c-51c4-4b4e-9d2a-7a0c3f1e2b02
HOSTNQN3=nqn.2014-08.org.nvmexpress:uuid:6f1e0a2c-51c4-4b4e-9d2a-7a0c3f1e2b03
HOSTNQN4=nqn.2014-08.org.nvmexpress:uuid:6f1e0a2c-51c4-4b4e-9d2a-7a0c3f1e2b04   # a SHA-384 key's
NVMET_NQN=nqn.2024-01.io.fabrik:guest:nvmet-tls
DATA=/data/fabrikd
FPID= TPID= RING= KEY= KEY384= SUBNQN=
OUT=/share/out

# ------------------------------------------------------------------ helpers
fab() {  # fabrik under timeout -> FAB_RC, FAB_OUT
  echo "  + fabrik $*"
  FAB_OUT=$(timeout 120 "$FABRIK" "$@" 2>&1); FAB_RC=$?
  echo "  fabrik: exit status $FAB_RC"; [ -n "$FAB_OUT" ] && cut -c1-300 <<<"$FAB_OUT" | sed 's/^/    | /'
  return 0
}
insert_psk() {  # hostnqn subnqn [key] -> the identity's TLS PSK in the .nvme keyring (as nvme check-tls-key --insert)
  local id
  id=$(FABRIK_TLS_KEY=${3:-$KEY} "$FABRIK" tls-identity -q "$1" -n "$2" --psk-out /tmp/psk.bin) || return 1
  echo "  identity: $id"
  keyctl padd psk "$id" "$RING" < /tmp/psk.bin > /dev/null || { echo "  keyctl padd failed"; return 1; }
}
ctrl_of() { local c; for c in /sys/class/nvme/nvme*; do [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && { basename "$c"; return 0; }; done; return 1; }
no_ctrl_of() { local i; for i in $(seq 1 20); do ctrl_of "$1" >/dev/null || return 0; sleep 0.5; done; return 1; }
round_trip() {  # dev: 1 MiB random, O_DIRECT, read back equal
  dd if=/dev/urandom of=/tmp/w.bin bs=1M count=1 2>/dev/null
  dd if=/tmp/w.bin of="$1" bs=1M count=1 oflag=direct 2>/dev/null || return 1
  dd if="$1" of=/tmp/r.bin bs=1M count=1 iflag=direct 2>/dev/null || return 1
  cmp /tmp/w.bin /tmp/r.bin
}
fabrikd_start() {
  mkdir -p /data && mount -t tmpfs tmpfs /data && mkdir -p $DATA || return 1
  printf '# the configured PSK for any host, and a SHA-384 one for host 4\n%s\n%s %s\n' "$KEY" "$HOSTNQN4" "$KEY384" > /tmp/tls.psk &&
    chmod 600 /tmp/tls.psk
  local cmd=("$FABRIKD" --data-dir $DATA --listen "$TRADDR:$TLS_PORT" --tls-psk /tmp/tls.psk
             --api 127.0.0.1:8080 --metrics off --drives 2 --drive-size 128M --backend ram)
  echo "  + ${cmd[*]}"
  RUST_LOG=${RUST_LOG:-info,fabrik_target::transport::tcp=debug} "${cmd[@]}" >> $LOGF 2>&1 &
  FPID=$!
  wait_port $TRADDR $TLS_PORT 60 && wait_port 127.0.0.1 8080 10 || { echo "  fabrikd does not listen"; cat $LOGF; return 1; }
  # (the API's sockets are bound before NVMe is served, its token written a moment later)
  local i; for i in $(seq 1 150); do [ -s $DATA/api-token ] && break; sleep 0.2; done
  TOKEN=$(cat $DATA/api-token) || return 1
  api GET /api/v1/subsystems > /dev/null || return 1
  SUBNQN=$(grep -o '"nqn":"[^"]*"' <<<"$API_BODY" | cut -d'"' -f4 | grep -- '-00$' | head -1)
  [ -n "$SUBNQN" ] || { echo "  no drive 00 subsystem in GET /api/v1/subsystems"; return 1; }
  echo "  fabrikd (pid $FPID) requires TLS on $TRADDR:$TLS_PORT; drive 00 is $SUBNQN"
}

# ------------------------------------------------------------------ steps
s_setup() {
  modprobe nvme-tcp && modprobe nvme-keyring && modprobe tls && modprobe nvmet-tcp && modprobe null_blk nr_devices=1 gb=1 memory_backed=1 || return 1
  # kTLS's AEADs (the kernel would ask for them too; here a missing one fails the setup, not a step)
  modprobe gcm && modprobe ghash-generic && modprobe ccm || return 1
  modprobe chacha20poly1305 && modprobe chacha-generic && modprobe poly1305-generic || return 1
  modprobe aesni-intel 2>/dev/null || echo "  (no AES-NI under this CPU model: generic AES)"
  RING=$(awk '$9 == ".nvme:" {print $1}' /proc/keys | head -1)
  assert "the kernel's .nvme keyring exists (/proc/keys)" [ -n "$RING" ] || { cat /proc/keys; return 1; }
  RING=$((16#$RING)); echo "  .nvme keyring: $RING"
  printf '[debug]\nloglevel=1\ntls=1\nnl=1\n[authenticate]\nkeyrings=.nvme\n' > /tmp/tlshd.conf
  tlshd -c /tmp/tlshd.conf -s > $OUT/tlshd.log 2>&1 &
  TPID=$!; sleep 1
  assert "tlshd (Debian 13's, pid $TPID) runs" kill -0 $TPID || { cat $OUT/tlshd.log; return 1; }
  KEY=$(nvme gen-tls-key --hmac=1 2>/dev/null | grep -o 'NVMeTLSkey-1:01:[^ ]*:' | head -1)
  assert "nvme gen-tls-key made a configured PSK" [ -n "$KEY" ] || return 1
  KEY384=$(nvme gen-tls-key --hmac=2 2>/dev/null | grep -o 'NVMeTLSkey-1:02:[^ ]*:' | head -1)
  assert "nvme gen-tls-key --hmac=2 made a SHA-384 one (89 characters)" [ "${#KEY384}" = 89 ] || return 1
  fabrikd_start
}
s_kernel_host() {
  insert_psk "$HOSTNQN" "$SUBNQN" || return 1
  fab connect --tls -t tcp -a $TRADDR -s $TLS_PORT -n "$SUBNQN" -q "$HOSTNQN"
  assert "fabrik connect --tls (the kernel's tls option) succeeds" [ "$FAB_RC" = 0 ] || { dmesg_tail 20; tail -20 $OUT/tlshd.log; tail -20 $LOGF; return 1; }
  local c dev= i
  for i in $(seq 1 40); do dev=$(ns_dev "$SUBNQN") && break; sleep 0.25; done
  c=$(ctrl_of "$SUBNQN")
  echo "  controller $c, namespace $dev; tls_key: $(cat /sys/class/nvme/$c/tls_key 2>/dev/null || echo -), tls_configured_key: $(cat /sys/class/nvme/$c/tls_configured_key 2>/dev/null || echo -)"
  assert "a namespace appeared" [ -n "$dev" ] && [ -b "$dev" ] || return 1
  assert "1 MiB written with O_DIRECT reads back equal over TLS" round_trip "$dev" || return 1
  assert "fio randwrite + crc32c verify, 4k and 128k, over TLS" eval 'fio_verify tls4k 4k 2 16 16 "$dev" && fio_verify tls128k 128k 2 4 32 "$dev"' || return 1
  local n q; n=$(grep -c 'TLS established' $LOGF); q=$(cat /sys/class/nvme/$c/queue_count)
  assert "fabrikd set up TLS on every queue of the controller ($n sessions, $q queues)" [ "$n" = "$q" ] || return 1
  nvme disconnect -n "$SUBNQN" > /dev/null
  assert "disconnected" no_ctrl_of "$SUBNQN"
}
s_kernel_host_v0() {  # a host whose keyring holds a version 0 identity only: the kernel falls back to it
  local id dev= i
  id=$(FABRIK_TLS_KEY=$KEY "$FABRIK" tls-identity --identity 0 -q "$HOSTNQN3" -n "$SUBNQN" --psk-out /tmp/psk0.bin) || return 1
  echo "  identity: $id"
  keyctl padd psk "$id" "$RING" < /tmp/psk0.bin > /dev/null || return 1
  fab connect --tls -t tcp -a $TRADDR -s $TLS_PORT -n "$SUBNQN" -q "$HOSTNQN3" -i 1
  assert "fabrik connect --tls with a version 0 identity succeeds" [ "$FAB_RC" = 0 ] || { dmesg_tail 10; return 1; }
  for i in $(seq 1 40); do dev=$(ns_dev "$SUBNQN") && break; sleep 0.25; done
  assert "1 MiB reads back equal" round_trip "$dev" || return 1
  assert "fabrikd logged the version 0 identity" grep -q "identity=NVMe0R01 $HOSTNQN3" $LOGF || return 1
  nvme disconnect -n "$SUBNQN" > /dev/null
  assert "disconnected" no_ctrl_of "$SUBNQN"
}
s_kernel_host_sha384() {  # a SHA-384 key: identity NVMe1R02
  local dev= i
  insert_psk "$HOSTNQN4" "$SUBNQN" "$KEY384" || return 1
  fab connect --tls -t tcp -a $TRADDR -s $TLS_PORT -n "$SUBNQN" -q "$HOSTNQN4" -i 1
  assert "fabrik connect --tls with a SHA-384 key succeeds" [ "$FAB_RC" = 0 ] || { dmesg_tail 10; tail -8 $OUT/tlshd.log; return 1; }
  for i in $(seq 1 40); do dev=$(ns_dev "$SUBNQN") && break; sleep 0.25; done
  assert "1 MiB reads back equal" round_trip "$dev" || return 1
  # tlshd 1.0 binds every key to SHA-256 (its SHA-384 suites are AES-256-GCM and ChaCha20):
  # fabrikd takes the hash of the host's binder, and the suite is then ChaCha20-Poly1305.
  echo "  tlshd's session: $(grep -o 'Session description: .*' $OUT/tlshd.log | tail -1)"
  assert "fabrikd accepted the SHA-384 identity" grep -q "identity=NVMe1R02 $HOSTNQN4" $LOGF || return 1
  nvme disconnect -n "$SUBNQN" > /dev/null
  assert "disconnected" no_ctrl_of "$SUBNQN"
}
s_kernel_clear_refused() {
  fab connect -t tcp -a $TRADDR -s $TLS_PORT -n "$SUBNQN" -q "$HOSTNQN"
  assert "a clear-text connect to the required port fails" [ "$FAB_RC" != 0 ] || { nvme disconnect -n "$SUBNQN"; return 1; }
  assert "and leaves no controller" no_ctrl_of "$SUBNQN"
}
s_discover_allowed() {
  api POST /api/v1/ports "{\"address\":\"$TRADDR\",\"service_id\":$ALLOWED_PORT,\"tls\":\"allowed\"}"
  assert "POST /api/v1/ports with tls allowed: 201, the view says allowed" eval '[ "$API_CODE" = 201 ] && grep -q "\"tls\":\"allowed\"" <<<"$API_BODY"' || return 1
  wait_port $TRADDR $ALLOWED_PORT 10 || return 1
  nvme discover -t tcp -a $TRADDR -s $ALLOWED_PORT -q "$HOSTNQN" > /tmp/disc.out 2>&1
  sed 's/^/    | /' /tmp/disc.out | head -30
  assert "nvme discover (clear text on the allowed port) lists drive 00" grep -q "$SUBNQN" /tmp/disc.out || return 1
  assert "its entries read sectype tls13" grep -qi 'sectype: *tls13' /tmp/disc.out || return 1
  assert "and treq not required" grep -qi 'treq: *not required' /tmp/disc.out
}
s_fabrik_vs_nvmet() {
  local port=$CFG/ports/3
  nvmet_port 3 tcp $TRADDR $NVMET_PORT || return 1
  echo tls1.3 > $port/addr_tsas || { echo "  addr_tsas tls1.3 refused"; return 1; }
  echo required > $port/addr_treq 2>/dev/null
  echo "  nvmet port 3: tsas $(cat $port/addr_tsas), treq $(cat $port/addr_treq)"
  nvmet_subsys "$NVMET_NQN" /dev/nullb0 any && nvmet_link "$NVMET_NQN" 3 || return 1
  insert_psk "$HOSTNQN2" "$NVMET_NQN" || return 1
  fab io-check -a $TRADDR -s $NVMET_PORT -n "$NVMET_NQN" -q "$HOSTNQN2" --tls-key "$KEY" -c 256 -i 2
  assert "fabrik io-check --tls-key against nvmet-tcp (tls1.3) verifies" eval '[ "$FAB_RC" = 0 ] && grep -q "read back and verified" <<<"$FAB_OUT"' ||
    { dmesg_tail 20; tail -20 $OUT/tlshd.log; return 1; }
  insert_psk "$HOSTNQN4" "$NVMET_NQN" "$KEY384" || return 1
  fab io-check -a $TRADDR -s $NVMET_PORT -n "$NVMET_NQN" -q "$HOSTNQN4" --tls-key "$KEY384" -c 256
  assert "and with a SHA-384 key (TLS_AES_256_GCM_SHA384)" eval '[ "$FAB_RC" = 0 ] && grep -q "read back and verified" <<<"$FAB_OUT"' || return 1
  local wrong; wrong=$(nvme gen-tls-key --hmac=1 2>/dev/null | grep -o 'NVMeTLSkey-1:01:[^ ]*:' | head -1)
  fab io-check -a $TRADDR -s $NVMET_PORT -n "$NVMET_NQN" -q "$HOSTNQN2" --tls-key "$wrong" -c 16
  assert "another key is refused with a TLS error" eval '[ "$FAB_RC" != 0 ] && grep -q "TLS handshake failed" <<<"$FAB_OUT"'
}
s_fabrik_vs_fabrikd() {
  fab io-check -a $TRADDR -s $TLS_PORT -n "$SUBNQN" -q "$HOSTNQN2" --tls-key "$KEY" -c 256 -i 2
  assert "fabrik io-check --tls-key against fabrikd verifies" eval '[ "$FAB_RC" = 0 ] && grep -q "read back and verified" <<<"$FAB_OUT"' || return 1
  fab discover -a $TRADDR -s $TLS_PORT -q "$HOSTNQN2" --tls-key "$KEY" --json
  assert "fabrik discover --tls-key on the required port: tls13 entries" eval '[ "$FAB_RC" = 0 ] && grep -q "\"sectype\": \"tls13\"" <<<"$FAB_OUT"'
}
s_end() {
  local rc=0
  kill -TERM $FPID; wait $FPID || rc=$?
  assert "fabrikd stops cleanly" [ $rc = 0 ] || return 1
  assert "fabrikd never panicked" [ "$(grep -c panicked $LOGF)" = 0 ]
}

CFG=/sys/kernel/config/nvmet
step "setup: keyring, tlshd, nvme gen-tls-key, fabrikd --tls-psk" s_setup
step "kernel host -> fabrikd over TLS (fabrik connect --tls)" s_kernel_host
step "kernel host -> fabrikd with a version 0 PSK identity" s_kernel_host_v0
step "kernel host -> fabrikd with a SHA-384 key" s_kernel_host_sha384
step "kernel host -> fabrikd in clear text: refused" s_kernel_clear_refused
step "nvme discover: an allowed port's sectype and treq" s_discover_allowed
step "fabrik's host -> nvmet-tcp with TLS (tlshd its server)" s_fabrik_vs_nvmet
step "fabrik's host -> fabrikd with TLS" s_fabrik_vs_fabrikd
step "fabrikd's end" s_end
dmesg > $OUT/dmesg.txt
kill $TPID 2>/dev/null
t_summary
