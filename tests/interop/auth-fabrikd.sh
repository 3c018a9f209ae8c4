#!/bin/bash
# auth-fabrikd.sh - guest script: NVMe in-band authentication (DH-HMAC-CHAP) between the Linux
# 6.12 host (nvme-tcp, nvme-cli 2.3 / libnvme 1.3) and fabrikd: the cases of auth-lib.sh (as
# auth-nvmet.sh runs them against the kernel target), the host's keys set through fabrikd's
# REST API (POST /api/v1/hosts, PUT /api/v1/hosts/{nqn}/keys, bearer token), plus fabrikd's
# own: the API's views of a host's keys, its default hash and DH group, keys lifted by PUT.
# fabrikd (from /share/bin) serves 2 ram drives on tcp 127.0.0.1:4420, its API on 127.0.0.1:8080;
# the subsystem is the one of drive 00 (GET /api/v1/subsystems, checked against nvme discover).
# The target_* hooks (fabrikd, its API) are in auth-fabrikd-lib.sh, shared with auth-fabrik-host.sh.
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
. /vmh/auth-fabrikd-lib.sh   # the target_* hooks: fabrikd on 127.0.0.1:4420, keys through its API
fabrikd_need
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
# ------------------------------------------------------------------ main
echo "auth-fabrikd: kernel $(uname -r), fabrikd $FABRIKD ($("$FABRIKD" --version 2>&1 | head -1))"
auth_need_612
step "target: fabrikd, 2 ram drives, tcp $TRADDR:$TRSVCID, API $API" target_start || true
[ "$T_FAILED" = 0 ] || { fabrikd_log; [ -n "$OUT" ] && cp $LOGF $OUT/; t_summary; exit 1; }
auth_steps
skip rest || step "REST: token, host views (flags, never secrets), malformed keys, discovery without a secret" s_rest
skip defaults || step "fabrikd's defaults: a secret without hash/DH group -> hmac(sha512), ffdhe2048" s_defaults
skip lifted || step "keys lifted (PUT all null): connects without authenticating" s_lifted
step "fabrikd log: no panic, no ERROR; stops cleanly" s_fabrikd_log
[ "$T_FAILED" = 0 ] || fabrikd_log
if [ -n "$OUT" ]; then cp $LOGF $OUT/; dmesg_all > $OUT/dmesg.txt; fi
t_summary
