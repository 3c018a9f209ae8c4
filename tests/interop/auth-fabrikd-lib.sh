# tests/interop/auth-fabrikd-lib.sh - fabrikd behind the target_* hooks of auth-lib.sh (in the
# guest as /vmh/auth-fabrikd-lib.sh), the host's keys set through its REST API (POST
# /api/v1/hosts, PUT /api/v1/hosts/{nqn}/keys, bearer token from api-token, bash /dev/tcp).
# Sourced after /vmh/lib.sh and /vmh/auth-lib.sh by auth-fabrikd.sh (the kernel host against it)
# and auth-fabrik-host.sh (fabrik's userspace host against it); sourcing it (re)defines every
# target_* hook.  fabrikd ($FABRIKD, default the one on PATH: /share/bin) serves 2 ram drives on
# tcp TRADDR:TRSVCID (127.0.0.1:4420), its API on API (127.0.0.1:8080), data in DATA (tmpfs),
# log in LOGF; SUBNQN is drive 00's subsystem (GET /api/v1/subsystems, checked against nvme
# discover).  Also: api, host_view, registered, fabrikd_need, fabrikd_log (ON_FAIL), the step
# s_fabrikd_log, OUT (/share/out when shared).
TRADDR=${TRADDR:-127.0.0.1} TRSVCID=${TRSVCID:-4420}
API=${API:-127.0.0.1:8080}
SUBNQN=                      # drive 00's, from the API (target_start)
DATA=${DATA:-/data/fabrik}
LOGF=${LOGF:-/tmp/fabrikd.log}
# fabrikd logs a host's (re-)authentication once per controller at info ("host authenticated
# (DH-HMAC-CHAP)", its admin queue), each I/O queue's at debug ("queue authenticated ... qid=N"),
# and each queue's Connect at debug ("queue connected ... must_authenticate=..").  The filter
# goes to fabrikd alone (RUST_LOG=... as an argument of the script replaces it).
FABRIKD_RUST_LOG=${RUST_LOG:-info,fabrik_target::controller::fabrics=debug,fabrik_target::controller::auth=debug}
export RUST_BACKTRACE=1 NO_COLOR=1
FABRIKD=${FABRIKD:-$(command -v fabrikd)}
OUT=; if grep -q ' /share 9p ' /proc/mounts; then OUT=/share/out; mkdir -p $OUT; fi
fabrikd_need() {  # the script cannot run without the binary
  [ -n "$FABRIKD" ] && [ -x "$FABRIKD" ] && return 0
  echo "FAIL: no fabrikd binary in the guest (PATH=$PATH)"; echo "0 passed, 1 failed"; exit 1
}

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
  echo "  + RUST_LOG=$FABRIKD_RUST_LOG ${cmd[*]} >> $LOGF 2>&1 &"
  RUST_LOG=$FABRIKD_RUST_LOG "${cmd[@]}" >> $LOGF 2>&1 &
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
target_no_ctrls() {  # (a controller whose host just went away may take a moment)
  local i
  for i in $(seq 1 20); do
    api GET /api/v1/controllers > /dev/null; [ "$(tr -d ' \n' <<<"$API_BODY")" = "[]" ] && break; sleep 0.5
  done
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

# ------------------------------------------------------------------ the end
s_fabrikd_log() {  # a step at the end: no panic, no ERROR; stops cleanly
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
