#!/usr/bin/env bash
# tests/api-schemathesis.sh - schemathesis (PyPI) against a running fabrikd's OpenAPI document:
# every operation fuzzed with the token, no server error, every answer's status, content type,
# headers and body as documented.
#   tests/api-schemathesis.sh FABRIKD_BINARY [VENV_DIR]
# The positive_data_acceptance check is left out: a schema-valid body may still name a drive
# that does not exist or a malformed NQN, and is rightly refused (404/409/422). POST /ports is
# left out: fuzzed addresses could open listeners beyond loopback (tests/integration/api.rs
# covers it).
set -uo pipefail
FABRIKD=${1:?usage: $0 FABRIKD_BINARY [VENV_DIR]}
VENV=${2:-${TMPDIR:-/tmp}/fabrik-schemathesis-venv}
EXAMPLES=${SCHEMATHESIS_EXAMPLES:-100}

if [ ! -x "$VENV/bin/schemathesis" ]; then
  python3 -m venv "$VENV" || { echo "python3 -m venv failed (apt python3-venv)"; exit 1; }
  "$VENV/bin/pip" install -q schemathesis || { echo "pip install schemathesis failed"; exit 1; }
fi
"$VENV/bin/schemathesis" --version

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DATA=$(mktemp -d)
NVME_PORT=$(free_port); API_PORT=$(free_port)
"$FABRIKD" --data-dir "$DATA" --listen 127.0.0.1:$NVME_PORT --api 127.0.0.1:$API_PORT \
  --drives 4 --drive-size 16M --backend ram > "$DATA/fabrikd.log" 2>&1 &
FPID=$!
cleanup() { kill "$FPID" 2>/dev/null; wait "$FPID" 2>/dev/null; rm -rf "$DATA"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  [ -s "$DATA/api-token" ] && python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$API_PORT/api/v1/openapi.json')" 2>/dev/null && break
  kill -0 $FPID 2>/dev/null || { echo "fabrikd exited:"; cat "$DATA/fabrikd.log"; exit 1; }
  sleep 0.1
done
# From the temp dir: schemathesis keeps a .schemathesis cache in its working directory.
cd "$DATA" || exit 1
"$VENV/bin/schemathesis" run "http://127.0.0.1:$API_PORT/api/v1/openapi.json" \
  -H "Authorization: Bearer $(cat "$DATA/api-token")" \
  --checks all --exclude-checks positive_data_acceptance --exclude-name "POST /api/v1/ports" \
  -n "$EXAMPLES"
rc=$?
kill -0 $FPID 2>/dev/null || { echo "fabrikd died during the run:"; tail -50 "$DATA/fabrikd.log"; rc=1; }
if grep -q panicked "$DATA/fabrikd.log"; then echo "fabrikd panicked:"; grep -A5 panicked "$DATA/fabrikd.log"; rc=1; fi
exit $rc
