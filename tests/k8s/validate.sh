#!/usr/bin/env bash
# tests/k8s/validate.sh - checks fabrik-csi's Kubernetes deployment: lints and renders the Helm
# chart deploy/helm/fabrik-csi (default values and tests/k8s/values-*.yaml), validates every
# rendered document and every deploy/k8s/*.yaml strictly against Kubernetes' OpenAPI schemas,
# and asserts what the driver needs of them (tests/k8s/validate.py says what). No cluster, no
# helm binary: Helm v4's engine comes from PyPI (helm-python-sdk), in a venv kept between runs.
#
#   tests/k8s/validate.sh [VENV_DIR]      (default: build/k8s-venv)
#
# Environment: K8S_VERSIONS="1.30 1.37" (the Kubernetes versions to validate against, each one
# that kubernetes-validate ships); NO_PIP=1 never installs (fails if the venv is not ready).
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
VENV=${1:-$REPO/build/k8s-venv}
REQ=$REPO/tests/k8s/requirements.txt
STAMP=$VENV/.fabrik-requirements

venv_ready() {
  [ -x "$VENV/bin/python" ] && cmp -s "$REQ" "$STAMP" &&
    "$VENV/bin/python" -c 'import helm_python, kubernetes_validate' 2>/dev/null
}
if ! venv_ready; then
  [ -n "${NO_PIP:-}" ] && { echo "venv $VENV is not ready (NO_PIP set)"; exit 1; }
  echo "creating $VENV ($(grep -v '^#' "$REQ" | paste -sd' '))"
  t0=$SECONDS
  # The stamp goes in last: an interrupted install is never taken for a ready venv.
  rm -rf "$VENV"
  python3 -m venv "$VENV" || { echo "python3 -m venv failed (apt python3-venv)"; exit 1; }
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" ||
    { echo "pip install -r $REQ failed"; exit 1; }
  # The wheel carries libhelm_c.so three times (.so, .so.0, .so.0.2.2: wheels have no links);
  # the loader takes the fullest name first, so the two copies become links (-170 MB).
  for lib in "$VENV"/lib/python3*/site-packages/helm_python/lib/libhelm_c.so.*.*.*; do
    [ -f "$lib" ] || continue
    for copy in "${lib%.so.*}.so" "${lib%.*.*}"; do
      [ -f "$copy" ] && [ ! -L "$copy" ] && cmp -s "$lib" "$copy" && ln -sf "$(basename "$lib")" "$copy"
    done
  done
  cp "$REQ" "$STAMP"
  echo "venv ready in $((SECONDS - t0))s: $(du -sh "$VENV" | cut -f1)"
fi
exec "$VENV/bin/python" "$REPO/tests/k8s/validate.py"
