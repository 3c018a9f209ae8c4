# shellcheck shell=bash
# What spdk-ab.sh and spdk-profile.sh share: fabrikd started the way both compare it, and the
# drives written before reads. Uses $work, $BACKEND, $N, $SPDK and $PERF_CORES; sets $pid.

start_fabrikd() { # BIN CORES PORT: pinned to CORES, N drives of 1 GiB, management off
  rm -rf "$work/data"; mkdir -p "$work/data"
  taskset -c "$2" "$1" --cores "$2" --data-dir "$work/data" --listen "127.0.0.1:$3" \
    --backend "$BACKEND" --drives "$N" --drive-size 1G --box-name box \
    --api off --api-socket off --metrics off >"$work/fabrikd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "listener" "$work/fabrikd.log" && break; sleep 0.1; done
  grep -q "listener" "$work/fabrikd.log" || { cat "$work/fabrikd.log"; exit 1; }
}

# Drives that hold data (not null) are written first, so reads meet written memory: 1 MiB writes
# for 2 s (on the H200 machine, 8 initiator cores, that wrote all of 4 x 1 GiB ram drives:
# 4 GiB of huge pages afterwards; a slower machine writes less of them).
precondition() { # PORT
  [ "$BACKEND" = null ] && return 0
  "$SPDK/perf.sh" "$N" "$1" box -c "$PERF_CORES" -q 8 -o 1048576 -w write -t 2 >/dev/null 2>&1 || true
}
