# shellcheck shell=bash
# What spdk-ab.sh and spdk-profile.sh share: fabrikd started the way both compare it, and the
# drives written before reads, either target started and stopped. Uses $work, $BACKEND, $N, $SPDK,
# $PERF_CORES, $port and $FABRIKD_ARGS (more arguments for every fabrikd); sets $pid.

start_fabrikd() { # BIN CORES PORT [DIR]: pinned to CORES, N drives of 1 GiB, management off
  local dir=${4:-$work}
  rm -rf "$dir/data"; mkdir -p "$dir/data"
  # shellcheck disable=SC2086
  taskset -c "$2" "$1" --cores "$2" --data-dir "$dir/data" --listen "127.0.0.1:$3" \
    --backend "$BACKEND" --drives "$N" --drive-size 1G --box-name box \
    --api off --api-socket off --metrics off ${FABRIKD_ARGS:-} >"$dir/fabrikd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "listener" "$dir/fabrikd.log" && break; sleep 0.1; done
  grep -q "listener" "$dir/fabrikd.log" || { cat "$dir/fabrikd.log"; exit 1; }
}

# Drives that hold data (not null) are written first, so reads meet written memory: 1 MiB writes
# for 2 s (on the H200 machine, 8 initiator cores, that wrote all of 4 x 1 GiB ram drives:
# 4 GiB of huge pages afterwards; a slower machine writes less of them).
precondition() { # PORT
  [ "$BACKEND" = null ] && return 0
  "$SPDK/perf.sh" "$N" "$1" box -c "$PERF_CORES" -q 8 -o 1048576 -w write -t 2 >/dev/null 2>&1 || true
}

# malloc bdevs live in hugepages: 4 x 1 GiB and SPDK's own pools (set up when run as root).
hugepages_for_malloc() {
  [ "$BACKEND" = ram ] && [ "$(id -u)" = 0 ] || return 0
  mkdir -p /dev/hugepages; mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages
  echo 4096 >/proc/sys/vm/nr_hugepages
}

mask_of() { # taskset list -> hex mask
  python3 -c 'import sys
m=0
for p in sys.argv[1].split(","):
    a,_,b=p.partition("-"); b=b or a
    for c in range(int(a),int(b)+1): m|=1<<c
print(hex(m))' "$1"
}

start_target() { # LABEL[=BIN] CORES: on a port of its own, files in $work/LABEL
  local label=${1%%=*} cores=$2 bin=${1#*=}
  port=$((port + 1))
  mkdir -p "$work/$label"
  if [ "$label" = spdk ]; then
    local bdev=null; [ "$BACKEND" = ram ] && bdev=malloc
    export SPDK_LOG=$work/spdk/nvmf_tgt.log
    pid=$("$SPDK/tgt.sh" "$(mask_of "$cores")" "$N" "$port" box "$bdev")
  else
    start_fabrikd "$bin" "$cores" "$port" "$work/$label"
  fi
  precondition "$port"
}

stop_target() { # [PID] (default $pid)
  local p=${1:-$pid}
  [ -n "$p" ] || return 0
  kill -CONT "$p" 2>/dev/null || true
  kill -INT "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  [ "$p" != "$pid" ] || pid=
}

# "IOPS MiB/s average-us" from spdk_nvme_perf's output (its "Total" line); zeros, with its last
# lines on stderr, if it has none.
perf_figures() { # OUTPUT WHAT
  local total
  total=$(grep -E '^Total' <<<"$1" | tail -1)
  [ -n "$total" ] || { echo "no result from perf for $2:" >&2; tail -5 <<<"$1" >&2; total="Total : 0 0 0"; }
  awk -F: '{print $2}' <<<"$total" | awk '{print $1, $2, $3}'
}
