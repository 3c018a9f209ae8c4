#!/bin/bash
# csi-sanity.sh - guest script, BY HAND only (CI cannot depend on ../shared): the Kubernetes CSI
# conformance suite (csi-sanity) against fabrik-csi, controller and node plugin in one process,
# over two fabrikd boxes on loopback (racks r1 and r2), the node side with the guest's kernel
# NVMe host. Put csi-sanity, fabrikd, fabrik-csi in the share's bin/, e.g.
#   S=$HOME/.cache/fabrik-interop/share-interop; mkdir -p $S/bin $S/out
#   cp ../shared/csi-sanity/csi-sanity build/release/{fabrikd,fabrik-csi} $S/bin/
#   SHARE_DIR=$S tests/interop/vm.sh run tests/interop/csi-sanity.sh [ACCESS=mount|block] [FOCUS=regex] [SKIP_SPECS=regex]
# Artifacts: /share/out/csi-sanity.log, csi-sanity-junit.xml, fabrik-csi.log, fabrikd-csi*.log.
set -u
. /vmh/lib.sh
args_to_env "$@"
export RUST_LOG=${RUST_LOG:-info} NO_COLOR=1
OUT=/tmp; grep -q ' /share 9p ' /proc/mounts && { OUT=/share/out; mkdir -p $OUT; }
data_dir_setup /data || { echo "FAIL: data dir setup"; exit 1; }
D=/data/csi-sanity; rm -rf $D; mkdir -p $D/a $D/b
for b in fabrikd fabrik-csi csi-sanity; do command -v $b > /dev/null || { echo "FAIL: no $b in the guest"; exit 1; }; done
modprobe nvme-tcp 2>/dev/null
fabrikd --data-dir $D/a --listen 127.0.0.1:4441 --box-name box-a --drives 10 --drive-size 96M \
  --backend file --api off --metrics off > $OUT/fabrikd-csi-a.log 2>&1 &
A=$!
fabrikd --data-dir $D/b --listen 127.0.0.1:4442 --box-name box-b --drives 10 --drive-size 96M \
  --backend file --api off --metrics off > $OUT/fabrikd-csi-b.log 2>&1 &
B=$!
for i in $(seq 100); do [ -S $D/a/api.sock ] && [ -S $D/b/api.sock ] && break; sleep 0.2; done
fabrik-csi --endpoint unix:///tmp/csi.sock --box "unix:$D/a/api.sock,rack=r1,drives=00-09" \
  --box "unix:$D/b/api.sock,rack=r2,drives=00-09" --node-id guest-node --rack r1 > $OUT/fabrik-csi.log 2>&1 &
C=$!
for i in $(seq 50); do [ -S /tmp/csi.sock ] && break; sleep 0.1; done
args=(--csi.endpoint=unix:///tmp/csi.sock --csi.mountdir=/tmp/csi-mount --csi.stagingdir=/tmp/csi-staging
      --csi.testvolumesize=16777216 --ginkgo.junit-report=$OUT/csi-sanity-junit.xml --ginkgo.v
      --ginkgo.timeout=50m --csi.testvolumeaccesstype=${ACCESS:-mount})
[ -n "${FOCUS:-}" ] && args+=(--ginkgo.focus="$FOCUS")
[ -n "${SKIP_SPECS:-}" ] && args+=(--ginkgo.skip="$SKIP_SPECS")
echo "+ csi-sanity ${args[*]}"
csi-sanity "${args[@]}" > $OUT/csi-sanity.log 2>&1; rc=$?
grep -E "^(Ran |PASS|FAIL|SUCCESS)|Passed.*Failed|\[FAIL\]" $OUT/csi-sanity.log | tail -40
echo "csi-sanity exit $rc"
kill -TERM $C; wait $C
kill -TERM $A $B; wait $A $B
dmesg > $OUT/dmesg-csi.txt
echo "$([ $rc = 0 ] && echo 1 || echo 0) passed, $([ $rc = 0 ] && echo 0 || echo 1) failed"
exit $rc
