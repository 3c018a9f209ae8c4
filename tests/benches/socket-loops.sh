#!/usr/bin/env bash
# The reactors' event loop, measured (target/examples/socket_loops.rs): tokio's epoll loop against
# raw io_uring (plain, and tuned: DEFER_TASKRUN, single issuer, registered sockets; uring-zc: tuned,
# sending with zero copy), alternated, medians of the rounds: requests/s and the server's CPU per
# request. Never in CI (a benchmark).
#
#   tests/benches/socket-loops.sh [ROUNDS [SECS]]      (default 5 rounds of 3 s)
#
# SHAPES="8x32 8x1 32x4": connections x queue depth each [x data bytes per response, default
#   4096; e.g. 4x8x131072]. LOOPS="epoll uring uring-tuned" (or uring-zc). SERVER_CORE=0
#   CLIENT_CORE=1.
# BIN=path of a socket_loops binary built elsewhere (a machine without cargo).
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-3}
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
SHAPES=${SHAPES:-"8x32 8x1 32x4"}
LOOPS=${LOOPS:-"epoll uring uring-tuned"}
bin=${BIN:-}
if [ -z "$bin" ]; then
  (cd "$REPO" && cargo build --release -q -p fabrik-target --example socket_loops)
  bin=$REPO/build/release/examples/socket_loops
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for shape in $SHAPES; do
  for r in $(seq "$ROUNDS"); do
    for l in $LOOPS; do
      IFS=x read -r conns qd bytes <<<"$shape"
      line=$(timeout $((SECS + 20)) "$bin" "$l" "$conns" "$qd" "$SECS" \
        "${SERVER_CORE:-0}" "${CLIENT_CORE:-1}" "${bytes:-4096}") ||
        { echo "$shape $l round $r: no result" >&2; continue; }
      echo "$shape $l $line" >>"$out"
    done
  done
done
echo "| shape (conns x QD [x bytes]) | loop | req/s | server us/req | user | system |"
echo "|---|---|---|---|---|---|"
median() { sort -g | awk '{v[NR]=$1} END {printf "%.10g\n", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for shape in $SHAPES; do
  for l in $LOOPS; do
    f() { awk -v s="$shape" -v l="$l" -v c="$1" '$1==s && $2==l {gsub(/[(),]/,"",$c); print $c}' "$out" | median; }
    echo "| $shape | $l | $(f 4) | $(f 7) | $(f 10) | $(f 12) |"
  done
done
