#!/bin/bash
# auth-fabrikd.sh - guest script: NVMe in-band authentication (DH-HMAC-CHAP) between the Linux
# 6.12 host (nvme-tcp, nvme-cli 2.3 / libnvme 1.3) and fabrikd: the cases of auth-lib.sh (as
# auth-nvmet.sh runs them against the kernel target), the host's keys set through fabrikd's
# REST API (POST /api/v1/hosts, PUT /api/v1/hosts/{nqn}/keys, bearer token), plus fabrikd's
# own: the API's views of a host's keys, its default hash and DH group, keys lifted by PUT.
# fabrikd (from /share/bin) serves 2 ram drives on tcp 127.0.0.1:4420, its API on 127.0.0.1:8080;
# the subsystem is the one of drive 00 (GET /api/v1/subsystems, checked against nvme discover).
#   tests/run interop-auth     (or by hand:)
#   KPKG=linux-image-6.12.100+deb12-amd64 FABRIK_INTEROP_CACHE=~/.cache/fabrik-interop-612 tests/interop/vm.sh prepare
#   mkdir -p x/bin x/out && cp build/release/fabrikd build/release/fabrik x/bin/
#   KPKG=... FABRIK_INTEROP_CACHE=... SHARE_DIR=x tests/interop/vm.sh run tests/interop/auth-fabrikd.sh [SKIP=...]
# Steps (SKIP keys): those of auth-lib.sh, and rest, defaults, lifted.  Args: RUST_LOG=...
# Artifacts: /share/out/fabrikd.log, dmesg.txt.  Exit status = failed steps.
set -u
. /vmh/lib.sh
args_to_env "$@"
. /vmh/auth-lib.sh
T_SUITE="DH-HMAC-CHAP: kernel nvme-tcp host vs fabrikd"
TRADDR=127.0.0.1 TRSVCID=4420
API=127.0.0.1:8080
SUBNQN=
DATA=/data/fabrik
LOGF=/tmp/fabrikd.log
# fabrikd logs a host's (re-)authentication once per controller at info ("host authenticated
# (DH-HMAC-CHAP)", its admin queue), each I/O queue's at debug ("queue authenticated ... qid=N"),
# and each queue's Connect at debug ("queue connected ... must_authenticate=..").
export RUST_LOG=${RUST_LOG:-info,fabrik_target::controller::fabrics=debug,fabrik_target::controller::auth=debug}
export RUST_BACKTRACE=1 NO_COLOR=1
FABRIKD=${FABRIKD:-$(command -v fabrikd)}
OUT=; if grep -q ' /share 9p ' /proc/mounts; then OUT=/share/out; mkdir -p $OUT; fi
[ -n "$FABRIKD" ] && [ -x "$FABRIKD" ] || { echo "FAIL: no fabrikd binary in the guest (PATH=$PATH)"; echo "0 passed, 1 failed"; exit 1; }

# ------------------------------------------------------------------ fabrikd's REST API
TOKEN=
api() {  # METHOD PATH [JSON]: bash /dev/tcp, HTTP/1.0, bearer token -> API_CODE, API_BODY
  local m=$1 path=$2 body=${3:-} resp req cr=$'\r'
  API_CODE= API_BODY=
  exec 3<>"/dev/tcp/${API%:*}/${API#*:}" || { echo "  api: cannot connect to $API"; return 1; }
  req="$m $path HTTP/1.0$cr"$'\n'"Host: $API$cr"$'\n'"Authorization: Bearer $TOKEN$cr"$'\n'
  [ -n "$body" ] && req+="Content-Type: application/json$cr"$'\n'"Content-Length: $(printf %s "$body" | wc -c)$cr"$'\n'
  printf '%s\r\n%s' "$req" "$body" >&3
  resp=$(timeout 30 cat <&3 | tr -d '\r'); exec 3<&-
  API_CODE=$(sed -n '1s/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' <<<"$resp")
  API_BODY=$(sed '1,/^$/d' <<<"$resp")
  echo "  + $m http://$API$path${body:+ $body} -> ${API_CODE:-no answer} $API_BODY"
  [ -n "$API_CODE" ]
}
json_str() { [ -n "$2" ] && printf ',"%s":"%s"' "$1" "$2"; return 0; }   # field value ("" = absent)
hash_name() { local h=${1#hmac(}; echo "${h%)}"; }                     # hmac(sha256) -> sha256
registered() { api GET "/api/v1/hosts/$HOSTNQN" > /dev/null; [ "$API_CODE" = 200 ]; }
host_view() {  # expected dhchap, dhchap_ctrl: GET /api/v1/hosts/{nqn} shows the flags, never a secret
  api GET "/api/v1/hosts/$HOSTNQN" || return 1
  [ "$API_CODE" = 200 ] && grep -qF "\"dhchap\":$1" <<<"$API_BODY" && grep -qF "\"dhchap_ctrl\":$2" <<<"$API_BODY" &&
    ! grep -qF 'DHHC-1' <<<"$API_BODY"
}

# ------------------------------------------------------------------ the target (fabrikd)
FPID=
target_start() {
  local i
  modprobe nvme-tcp && modprobe nvme-auth || return 1
  mkdir -p /data && mount -t tmpfs tmpfs /data && mkdir -p $DATA || return 1
  local cmd=("$FABRIKD" --data-dir $DATA --listen "$TRADDR:$TRSVCID" --api $API --metrics off
             --drives 2 --drive-size 128M --backend ram)
  echo "  + RUST_LOG=$RUST_LOG ${cmd[*]} >> $LOGF 2>&1 &"
  "${cmd[@]}" >> $LOGF 2>&1 &
  FPID=$!
  for i in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$TRADDR/$TRSVCID") 2>/dev/null && (exec 3<>"/dev/tcp/${API%:*}/${API#*:}") 2>/dev/null && break
    kill -0 $FPID 2>/dev/null || { wait $FPID; echo "  fabrikd exited with status $? before listening"; cat $LOGF; FPID=; return 1; }
    sleep 0.1
  done
  check "fabrikd (pid $FPID) listens on $TRADDR:$TRSVCID and its API on $API" wait_port $TRADDR $TRSVCID 1 || return 1
  sed 's/^/  fabrikd: /' $LOGF
  TOKEN=$(cat $DATA/api-token) || return 1
  api GET /api/v1/subsystems > /tmp/subsystems.txt || return 1
  SUBNQN=$(grep -o '"nqn":"[^"]*"' <<<"$API_BODY" | cut -d'"' -f4 | grep -- '-00$' | head -1)
  check "GET /api/v1/subsystems: drive 00's subsystem ($SUBNQN)" eval '[ "$API_CODE" = 200 ] && [ -n "$SUBNQN" ]' || return 1
  disc_nqns -t tcp -a $TRADDR -s $TRSVCID > /tmp/disc.nqns
  check "nvme discover lists it ($(tr '\n' ' ' < /tmp/disc.nqns))" grep -qx "$SUBNQN" /tmp/disc.nqns
}
target_host_keys() {  # hostkey ctrlkey hash dhgroup: POST /hosts, PUT /hosts/{nqn}/keys
  local body h=; [ -n "$3" ] && h=$(hash_name "$3")
  body="$(json_str dhchap_secret "$1")$(json_str dhchap_ctrl_secret "$2")$(json_str dhchap_hash "$h")$(json_str dhchap_dhgroup "$4")"
  if [ -z "$1" ] && [ -z "$2" ]; then   # a host registered without a secret: afresh
    if registered; then api DELETE "/api/v1/hosts/$HOSTNQN" && [ "$API_CODE" = 204 ] || return 1; fi
    api POST /api/v1/hosts "{\"nqn\":\"$HOSTNQN\"}" && [ "$API_CODE" = 201 ] || return 1
  elif registered; then
    api PUT "/api/v1/hosts/$HOSTNQN/keys" "{${body#,}}" && [ "$API_CODE" = 200 ] || return 1
  else
    api POST /api/v1/hosts "{\"nqn\":\"$HOSTNQN\"$body}" && [ "$API_CODE" = 201 ] || return 1
  fi
  host_view "$([ -n "$1" ] && echo true || echo false)" "$([ -n "$2" ] && echo true || echo false)" ||
    { echo "  GET /api/v1/hosts/<hostnqn> does not show the keys as set (or shows a secret)"; return 1; }
}
target_rotate_key() {  # hostkey ctrlkey hash dhgroup: PUT /hosts/{nqn}/keys while connected
  api PUT "/api/v1/hosts/$HOSTNQN/keys" \
    "{\"dhchap_secret\":\"$1\"$(json_str dhchap_ctrl_secret "$2")$(json_str dhchap_hash "$(hash_name "$3")")$(json_str dhchap_dhgroup "$4")}" &&
    [ "$API_CODE" = 200 ]
}
target_stop() {
  [ -n "$FPID" ] || return 0
  kill -TERM $FPID; wait $FPID; local rc=$?; FPID=
  echo "  fabrikd exited with status $rc"
  [ $rc = 0 ]
}
MARK=0
target_mark() { MARK=$(wc -l < $LOGF); }
since() { tail -n +$((MARK + 1)) $LOGF; }
target_says_auth() { target_auth_qids | grep -qx 0; }
target_says_noauth() {  # (the "queue connected" lines are debug messages: RUST_LOG)
  ! since | grep -q 'authenticated' && ! since | grep 'queue connected' | grep -q 'must_authenticate=true'
}
target_auth_qids() {  # the (re: re-)authenticated queues since the mark: qid 0 from "host
  # authenticated (DH-HMAC-CHAP)" (or "queue authenticated ... qid=0"), the others from debug lines
  local re=${1:+re-}
  since | sed -n -e "s/.*host ${re}authenticated (DH-HMAC-CHAP).*/0/p" \
                 -e "s/.*queue ${re}authenticated.* qid=\([0-9]*\).*/\1/p" | sort -un
}
target_ctrl_kept() {
  ! since | grep -qE 'controller (created|torn down)' || return 1
  api GET /api/v1/controllers > /dev/null && [ "$(grep -o '"cntlid"' <<<"$API_BODY" | wc -l)" = 1 ]
}
target_no_ctrls() {
  api GET /api/v1/controllers > /dev/null
  check "fabrikd: GET /api/v1/controllers is empty" [ "$(tr -d ' \n' <<<"$API_BODY")" = "[]" ]
}
target_msgs() {  # fabrikd's log since the mark (the API's requests left out), cut to 220 characters
  echo "  fabrikd log since the case began:"
  since | grep -vE '^\s*$' | cut -c1-220 | sed 's/^/    | /'
  return 0
}
fabrikd_log() {  # ON_FAIL and at the end on failure
  echo "---- fabrikd log ($LOGF): lines with 'authenticat'"
  grep -i 'authenticat' $LOGF | cut -c1-250 | sed 's/^/  fabrikd: /'
  echo "---- fabrikd log: last 30 lines"
  tail -n 30 $LOGF | cut -c1-250 | sed 's/^/  fabrikd: /'
  echo "----"
}
ON_FAIL=fabrikd_log

# ------------------------------------------------------------------ fabrikd's own steps
s_rest() {  # the API: token required, flags shown and never secrets, malformed keys refused
  local t=$TOKEN
  case_begin
  TOKEN=wrong; api PUT "/api/v1/hosts/$HOSTNQN/keys" "{\"dhchap_secret\":\"$HK1\"}"; TOKEN=$t
  check "PUT .../keys with a wrong token: 401" [ "$API_CODE" = 401 ]
  api PUT "/api/v1/hosts/$HOSTNQN/keys" '{"dhchap_secret":"DHHC-1:01:bm90IGEga2V5:"}'
  check "PUT .../keys with a malformed secret: 422" [ "$API_CODE" = 422 ]
  api PUT "/api/v1/hosts/$HOSTNQN/keys" "{\"dhchap_secret\":\"$HK1\",\"dhchap_hash\":\"md5\"}"
  check "PUT .../keys with an unknown hash: 422" [ "$API_CODE" = 422 ]
  api PUT "/api/v1/hosts/$HOSTNQN/keys" "{\"dhchap_secret\":\"$HK1\",\"dhchap_dhgroup\":\"ffdhe1024\"}"
  check "PUT .../keys with an unknown DH group: 422" [ "$API_CODE" = 422 ]
  check "PUT .../keys host + ctrl secret, sha512, ffdhe3072: 200" \
    eval 'api PUT "/api/v1/hosts/$HOSTNQN/keys" "{\"dhchap_secret\":\"$HK1\",\"dhchap_ctrl_secret\":\"$CK1\",\"dhchap_hash\":\"sha512\",\"dhchap_dhgroup\":\"ffdhe3072\"}" >/dev/null && [ "$API_CODE" = 200 ]'
  check "GET /api/v1/hosts/<hostnqn>: dhchap true, dhchap_ctrl true, sha512, ffdhe3072, no secret" \
    eval 'host_view true true && grep -qF "\"dhchap_hash\":\"sha512\"" <<<"$API_BODY" && grep -qF "\"dhchap_dhgroup\":\"ffdhe3072\"" <<<"$API_BODY"'
  api GET /api/v1/hosts > /dev/null
  check "GET /api/v1/hosts lists the host, without a secret" eval 'grep -qF "$HOSTNQN" <<<"$API_BODY" && ! grep -qF DHHC-1 <<<"$API_BODY"'
  check "no secret in fabrikd's state file (sealed) nor in its log" eval '! grep -qF "${HK1:10:20}" $DATA/state.json && ! grep -qF "${HK1:10:20}" $LOGF'
  disc_nqns -t tcp -a $TRADDR -s $TRSVCID > /tmp/disc.nqns
  check "nvme discover (no secret) still lists $SUBNQN: discovery asks for no authentication" grep -qx "$SUBNQN" /tmp/disc.nqns
  check "no controller left after discovery" wait_no_ctrls 10
  case_end
}
s_defaults() {  # a secret without hash or DH group: fabrikd picks (the strongest hash, ffdhe2048)
  case_begin; good_case "$HK1" "$CK1" "" "" "hmac(sha512)" ffdhe2048; case_end
}
s_lifted() {  # PUT .../keys with every field null: the host no longer authenticates, with or without a secret
  case_begin
  target_host_keys "$HK1" "$CK1" "hmac(sha256)" null || return 1
  api PUT "/api/v1/hosts/$HOSTNQN/keys" '{"dhchap_secret":null,"dhchap_ctrl_secret":null,"dhchap_hash":null,"dhchap_dhgroup":null}'
  check "PUT .../keys all null: 200" [ "$API_CODE" = 200 ]
  check "GET /api/v1/hosts/<hostnqn>: dhchap false, dhchap_ctrl false" host_view false false
  target_mark
  host_connect ""
  check "nvme connect without a secret succeeds" [ "$CONN_RC" = 0 ] || { kmsgs; return 1; }
  check "controller live, namespace block device present" wait_dev || { kmsgs; disconnect; return 1; }
  kmsgs
  check "no 'authenticated' message" eval '! dmesg_has authenticated'
  check "target: no authentication" target_says_noauth
  check "I/O: 1 MiB O_DIRECT write + read back on $DEV identical" io_check "$DEV"
  disconnect
  case_end
}
s_log() {
  local n_err n_warn
  n_err=$(grep -cE '\bERROR\b' $LOGF); n_warn=$(grep -cE '\bWARN\b' $LOGF)
  echo "  fabrikd log: $(wc -l < $LOGF) lines, $n_err ERROR, $n_warn WARN"
  grep -E '\b(ERROR|WARN)\b' $LOGF | cut -c1-220 | sed 's/^/  fabrikd: /'
  echo "  'host authenticated': $(grep -c 'host authenticated' $LOGF), 'host re-authenticated': $(grep -c 'host re-authenticated' $LOGF), 'queue authenticated': $(grep -c 'queue authenticated' $LOGF), 'queue re-authenticated': $(grep -c 'queue re-authenticated' $LOGF),"
  echo "  'authentication failed': $(grep -c 'authentication failed' $LOGF), host's failure: $(grep -c 'the host ended authentication' $LOGF), deadline: $(grep -c 'did not authenticate within' $LOGF)"
  check "fabrikd never panicked" [ "$(grep -c 'panicked' $LOGF)" = 0 ]
  check "no ERROR in fabrikd's log" [ "$n_err" = 0 ]
  check "fabrikd stops cleanly (SIGTERM, status 0)" target_stop
}

# ------------------------------------------------------------------ main
echo "auth-fabrikd: kernel $(uname -r), fabrikd $FABRIKD ($("$FABRIKD" --version 2>&1 | head -1))"
auth_need_612
step "target: fabrikd, 2 ram drives, tcp $TRADDR:$TRSVCID, API $API" target_start || true
[ "$T_FAILED" = 0 ] || { fabrikd_log; [ -n "$OUT" ] && cp $LOGF $OUT/; t_summary; exit 1; }
auth_steps
skip rest || step "REST: token, host views (flags, never secrets), malformed keys, discovery without a secret" s_rest
skip defaults || step "fabrikd's defaults: a secret without hash/DH group -> hmac(sha512), ffdhe2048" s_defaults
skip lifted || step "keys lifted (PUT all null): connects without authenticating" s_lifted
step "fabrikd log: no panic, no ERROR; stops cleanly" s_log
[ "$T_FAILED" = 0 ] || fabrikd_log
if [ -n "$OUT" ]; then cp $LOGF $OUT/; dmesg_all > $OUT/dmesg.txt; fi
t_summary
