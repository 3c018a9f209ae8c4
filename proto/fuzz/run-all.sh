#!/usr/bin/env bash
# Builds every fuzz target of fabrik-proto and runs each for N seconds (default 10).
# Exits non-zero if a target fails to build or finds a crash (kept under artifacts/<target>/).
#
#   proto/fuzz/run-all.sh [SECONDS]
#
# Stable Rust needs `--sanitizer none`; set FUZZ_TOOLCHAIN=+nightly and FUZZ_SANITIZER=address
# for ASan builds. Seeds in corpus/<target>/ are read only: new inputs go to a scratch
# directory so runs never dirty the checked-in corpus.
set -euo pipefail

secs="${1:-10}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# The repository's .cargo/config.toml sends builds to the shared build/ folder; keep the
# fuzz builds (different flags) in this crate's own ignored target/.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
toolchain="${FUZZ_TOOLCHAIN:-}"
sanitizer="${FUZZ_SANITIZER:-none}"

if ! cargo $toolchain fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 2
fi

targets=(tcp_decoder sqe_commands connect_data identify log_pages cqe_sgl rdma_cm auth_messages tls_psk dim_data)
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cargo $toolchain fuzz build --sanitizer "$sanitizer"

failed=()
for t in "${targets[@]}"; do
    echo "=== $t: ${secs}s"
    mkdir -p "$scratch/$t"
    # The first corpus directory receives new inputs; the seeds are only read.
    if ! cargo $toolchain fuzz run --sanitizer "$sanitizer" "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
        failed+=("$t")
    fi
done

if ((${#failed[@]})); then
    echo "fuzz targets that failed: ${failed[*]} (inputs under $here/artifacts/)" >&2
    exit 1
fi
echo "all ${#targets[@]} fuzz targets ran ${secs}s without a crash"
