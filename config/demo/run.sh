#!/usr/bin/env bash
# make demo: starts the demo origins, a token endpoint and scopeproxy on config/demo/demo.yaml, sends
# the requests the README describes, and checks that each shows what it claims (the status, the body,
# what the origin received, the access log). The first step that does not ends the demo with exit 1
# and a line naming the step. `--keep` (make demo KEEP=1) leaves everything running afterwards and
# prints the commands to try by hand.
#
#   SCOPEPROXY_BINARY   the binary (default .build/release/scopeproxy)
#   DEMO_DIR            where the demo writes: the origins' certificates, the proxy's CA, the logs
#                       (default ~/.cache/scopeproxy-demo, the directory config/demo/demo.yaml names;
#                       never inside the checkout)
#   DEMO_PORTS          fixed (default: the proxy on 18080, the servers on 18765..18770, as the README
#                       shows) or free (each server takes a free port and says which)
#   DEMO_CONFIG         the config to run (default config/demo/demo.yaml): run on an edited copy, the
#                       demo names the first claim the edit breaks
#   DEMO_READY_SECONDS  how long each server may take to come up (default 30; a loaded machine is slow)
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "demo: $*" >&2; exit 1; }
KEEP=0
case "${1:-}" in
  "") ;;
  --keep) KEEP=1 ;;
  *) echo "usage: config/demo/run.sh [--keep]" >&2; exit 2 ;;
esac
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
SOURCE_CONFIG=${DEMO_CONFIG:-config/demo/demo.yaml}
READY_SECONDS=${DEMO_READY_SECONDS:-30}
# The directory config/demo/demo.yaml names for its files; a copy names DEMO_DIR instead.
CONFIG_DIR_TEXT='~/.cache/scopeproxy-demo'
DIR=${DEMO_DIR:-$HOME/.cache/scopeproxy-demo}
# The ports config/demo/demo.yaml names, which a copy replaces with the ports the servers got.
declare -A FIXED=([proxy]=18080 [api]=18765 [cdn]=18766 [secure-api]=18767 [github]=18768 [token-endpoint]=18769 [partner]=18770)
declare -A ASK PORT PID
case ${DEMO_PORTS:-fixed} in
  fixed) for name in "${!FIXED[@]}"; do ASK[$name]=${FIXED[$name]}; done ;;
  free) for name in "${!FIXED[@]}"; do ASK[$name]=0; done ;;
  *) die "DEMO_PORTS is fixed or free, not '${DEMO_PORTS}'" ;;
esac
[ -x "$BINARY" ] || die "no scopeproxy binary at $BINARY (make release builds it; SCOPEPROXY_BINARY names another)"
[ -f "$SOURCE_CONFIG" ] || die "no config at $SOURCE_CONFIG"
for tool in curl openssl python3 flock; do command -v "$tool" >/dev/null || die "the demo needs $tool"; done

# The demo's directory: the user's own (0700), one demo at a time in it. It is kept between runs, so
# the proxy's CA and the placeholder key stay the same (a placeholder exported earlier keeps working);
# run/ holds this run's logs, ready files and answers, and is made afresh.
case $DIR in /*) ;; *) die "DEMO_DIR must be an absolute path, not '$DIR'" ;; esac
case $DIR in *[\"\|\&\\]*) die "DEMO_DIR must not contain \", |, & or \\ (it is written into the config)" ;; esac
mkdir -p "$DIR"
{ [ ! -L "$DIR" ] && [ -O "$DIR" ]; } || die "$DIR is not a directory of yours"
chmod 700 "$DIR"
exec 9>"$DIR/run.lock"
flock -n 9 || die "another demo is running in $DIR (stop it, or set DEMO_DIR to another directory)"
RUN=$DIR/run
rm -rf "$RUN"
mkdir "$RUN"

# Shown paths: ~ for the home directory, so the printed commands read as the README's.
show() { case $1 in "$HOME"/*) printf '~/%s' "${1#"$HOME"/}" ;; *) printf %s "$1" ;; esac; }

# SIGTERM, then SIGKILL for a server still there after 5 s (one started with SIGTERM blocked: a
# caller's signal mask is inherited), so no server outlives the demo.
stop_servers() {
  local name deadline=$((SECONDS + 5))
  for name in "${!PID[@]}"; do kill "${PID[$name]}" 2>/dev/null || true; done
  for name in "${!PID[@]}"; do
    while kill -0 "${PID[$name]}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL "${PID[$name]}" 2>/dev/null || true
    wait "${PID[$name]}" 2>/dev/null || true
  done
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME COMMAND...: in the background, its output to run/NAME.log (none to the demo's own
# output, which a caller may read to its end), without the lock (it is the demo's, not the server's).
start() {
  local name=$1; shift
  : > "$RUN/$name.log"   # there before anything reads it: the background job opens it later
  "$@" </dev/null >>"$RUN/$name.log" 2>&1 9>&- &
  PID[$name]=$!
}

label() { case $1 in proxy) echo "scopeproxy" ;; token-endpoint) echo "the token endpoint" ;; *) echo "the $1 origin" ;; esac; }
# A server that did not come up: its name, why, and the end of its log; exit 1.
server_failed() {
  local name=$1 reason=$2
  echo "demo: $(label "$name") $reason; the end of its log ($(show "$RUN/$name.log")):" >&2
  tail -n 20 "$RUN/$name.log" | sed 's/^/   /' >&2
  if [ "${DEMO_PORTS:-fixed}" = fixed ] && grep -qi "in use" "$RUN/$name.log"; then
    echo "   (port ${ASK[$name]} is taken; DEMO_PORTS=free picks free ports)" >&2
  fi
  exit 1
}

# Waits, at most READY_SECONDS, until `ready_when NAME` holds, failing as soon as the server exits.
await() {
  local name=$1 what=$2 deadline=$((SECONDS + READY_SECONDS)) status
  until "ready_when_$what" "$name"; do
    if ! kill -0 "${PID[$name]}" 2>/dev/null; then
      wait "${PID[$name]}" && status=0 || status=$?
      server_failed "$name" "exited (status $status) before it was ready"
    fi
    [ $SECONDS -lt $deadline ] || server_failed "$name" "was not ready within $READY_SECONDS s ($(describe_$what))"
    sleep 0.1
  done
}
# The server's own word that it listens (demo_server.py): a probe alone could reach another program
# that holds a fixed port; the file is written only by the server that got it.
ready_when_listening() { [ -s "$RUN/$1.port" ]; }
describe_listening() { echo "it wrote no ready file"; }
# ...then an answer to GET /ready (over TLS with the origins' CA: the certificate is loaded).
ready_when_answering() {
  local name=$1
  case $name in
    secure-api|github) curl -sf -o /dev/null --max-time 5 --cacert "$DIR/origin-ca.pem" "https://localhost:${PORT[$name]}/ready" ;;
    *) curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:${PORT[$name]}/ready" ;;
  esac
}
describe_answering() { echo "it did not answer GET /ready"; }
# The proxy prints `listening on HOST:PORT` once its socket listens (its documented signal for
# scripts): a connection made from then on waits in the backlog until it is served.
ready_when_proxy_listening() { grep -q '^listening on ' "$RUN/$1.log"; }
describe_proxy_listening() { echo "it printed no 'listening on' line"; }

wait_for_server() {
  local name=$1
  await "$name" listening
  PORT[$name]=$(cat "$RUN/$name.port")
  await "$name" answering
}

# The https origins' certificate, from a CA of their own that the proxy trusts (tls.upstream_ca).
make_origin_certificate() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$RUN/origin-ca.key" \
    -out "$DIR/origin-ca.pem" -days 1 -subj "/CN=demo origin CA" &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$RUN/origin.key" -out "$RUN/origin.csr" \
    -subj "/CN=localhost" &&
  printf 'subjectAltName=DNS:localhost\n' > "$RUN/origin.ext" &&
  openssl x509 -req -in "$RUN/origin.csr" -CA "$DIR/origin-ca.pem" -CAkey "$RUN/origin-ca.key" -CAcreateserial -CAserial "$RUN/origin-ca.srl" \
    -out "$RUN/origin.pem" -days 1 -extfile "$RUN/origin.ext"
}
make_origin_certificate 2>"$RUN/openssl.log" || { cat "$RUN/openssl.log" >&2; die "openssl could not make the demo origins' certificate"; }

# The servers. The token endpoint and the proxy share the partner's client secret; the proxy alone
# holds the tokens (config/demo/demo.yaml reads them from the environment).
PARTNER_SECRET=demo-client-secret-000
# python3 -B: the servers import config/demo/demo_server.py, and nothing may be written into the checkout.
origin() { local name=$1; shift; start "$name" python3 -B config/demo/origin.py "$name" --port "${ASK[$name]}" --ready-file "$RUN/$name.port" "$@"; }
origin cdn
origin secure-api --cert "$RUN/origin.pem" --key "$RUN/origin.key"
origin github --cert "$RUN/origin.pem" --key "$RUN/origin.key"
origin partner
start token-endpoint env DEMO_PARTNER_CLIENT_SECRET=$PARTNER_SECRET python3 -B config/demo/token_endpoint.py \
  --port "${ASK[token-endpoint]}" --ready-file "$RUN/token-endpoint.port" --client-id demo-client
wait_for_server cdn
origin api --redirect-to "http://127.0.0.1:${PORT[cdn]}/files/report.pdf"
for name in secure-api github partner token-endpoint api; do wait_for_server "$name"; done

# The config as it is, or a copy naming DEMO_DIR and the ports the servers got.
substitutions=()
[ -z "${DEMO_DIR:-}" ] || substitutions+=(-e "s|$CONFIG_DIR_TEXT|$DIR|g")
for name in "${!PORT[@]}"; do substitutions+=(-e "s/:${FIXED[$name]}\\b/:${PORT[$name]}/g"); done
sed "${substitutions[@]}" "$SOURCE_CONFIG" > "$RUN/demo.yaml"
if cmp -s "$SOURCE_CONFIG" "$RUN/demo.yaml"; then CONFIG=$SOURCE_CONFIG; else CONFIG=$DIR/demo.yaml; mv "$RUN/demo.yaml" "$CONFIG"; fi

start proxy env DEMO_API_TOKEN=demo-api-token-123 DEMO_CDN_TOKEN=demo-cdn-token-456 DEMO_GH_TOKEN=demo-gh-token-789 \
  DEMO_PARTNER_CLIENT_SECRET=$PARTNER_SECRET "$BINARY" run --config "$CONFIG" --listen "127.0.0.1:${ASK[proxy]}"
await proxy proxy_listening
PORT[proxy]=$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$RUN/proxy.log")
# What must never appear in scopeproxy's log: every value it holds, and the client's X-API-Key.
SECRETS=(demo-api-token-123 demo-cdn-token-456 demo-gh-token-789 $PARTNER_SECRET demo-access-token-1 client-secret)

PROXY=http://127.0.0.1:${PORT[proxy]}
API=http://127.0.0.1:${PORT[api]}
SECURE_API=https://localhost:${PORT[secure-api]}
GITHUB=https://localhost:${PORT[github]}
PARTNER=http://127.0.0.1:${PORT[partner]}
SHOWN_BINARY=$(show "$BINARY")
SHOWN_CONFIG=$(show "$CONFIG")
SHOWN_CA=$(show "$DIR/scopeproxy-ca.pem")

# Steps and their checks. Each step counts the lines of every server's log when it begins, so
# `received` knows which requests arrived during the step.
STEP=""
declare -A LINES
# A server's log lines that say something: an empty line (a server's stray newline) is no request.
lines_of() { grep -c . "$RUN/$1.log" || true; }
step() {
  STEP=$1
  echo
  echo "== $1: $2"
  for name in "${!PID[@]}"; do LINES[$name]=$(lines_of "$name"); done
}
fail() {
  echo "demo: step \"$STEP\" failed: $*" >&2
  echo "   the end of scopeproxy's log ($(show "$RUN/proxy.log")):" >&2
  tail -n 5 "$RUN/proxy.log" | sed 's/^/   /' >&2
  exit 1
}
command_line() { echo "   $*"; }
# request NAME CURL-ARGUMENTS...: the answer's body in BODY (and run/NAME), its status in STATUS.
request() {
  local name=$1; shift
  local code=0
  STATUS=$(curl -sS -o "$RUN/$name" -w '%{http_code}' "$@" 2>"$RUN/$name.curl") || code=$?
  [ "$code" = 0 ] || fail "curl exited with status $code: $(cat "$RUN/$name.curl")"
  BODY=$(cat "$RUN/$name")
}
expect_status() { [ "$STATUS" = "$1" ] || fail "expected HTTP $1, got $STATUS: $BODY"; }
expect() { case $2 in *"$3"*) ;; *) fail "expected $1 ($3); got: ${2:-nothing}" ;; esac; }
refute() { case $2 in *"$3"*) fail "did not expect $1 ($3); got: $2" ;; esac; }
# received NAME [COUNT]: the requests NAME's log shows since the step began (1 unless COUNT), shown;
# its last non-empty line in RECEIVED.
received() {
  local name=$1 count=${2:-1} now
  now=$(lines_of "$name")
  [ $((now - LINES[$name])) = "$count" ] || fail "expected $(label "$name") to receive $count request(s) in this step; it received $((now - LINES[$name]))"
  if [ "$count" = 0 ]; then RECEIVED=""; echo "   what $(label "$name") received (its own log): nothing"; return; fi
  RECEIVED=$(grep . "$RUN/$name.log" | tail -n 1)
  echo "   what $(label "$name") received (its own log): $RECEIVED"
}

echo "scopeproxy demo: the proxy on $PROXY with $SHOWN_CONFIG; logs in $(show "$RUN")"

step "redirect through scopeproxy" "curl -L with a client-side X-API-Key the app should never have sent to a CDN:"
command_line "curl -x $PROXY -L -H \"X-API-Key: client-secret\" $API/download"
request redirect-proxied -x "$PROXY" -L -H "X-API-Key: client-secret" "$API/download"
echo "$BODY"
received cdn
expect_status 200
expect "the cdn to receive its own token" "$RECEIVED" '"x-cdn-token": "demo-cdn-token-456"'
refute "the cdn to receive the client's X-API-Key" "$RECEIVED" '"x-api-key"'
refute "the client to see the cdn's token" "$BODY" "demo-cdn-token-456"

step "redirect without scopeproxy" "the same request sent directly (what leaks today):"
command_line "curl -L -H \"X-API-Key: client-secret\" $API/download"
request redirect-direct -L -H "X-API-Key: client-secret" "$API/download"
echo "$BODY"
received cdn
expect_status 200
expect "the cdn to receive the client's X-API-Key (curl carries it across the redirect)" "$RECEIVED" '"x-api-key": "client-secret"'

step "token injected" "a direct call to the api through scopeproxy (the client holds no secret):"
command_line "curl -x $PROXY $API/v1/books?limit=5"
request api -x "$PROXY" "$API/v1/books?limit=5"
echo "$BODY"
received api
expect_status 200
expect "the api to receive the injected token" "$RECEIVED" '"authorization": "Bearer demo-api-token-123"'
expect "the client to see the token masked by the response scrub" "$BODY" '"authorization": "Bearer ****'
refute "the client to see the token" "$BODY" "demo-api-token-123"
echo "   (the origins echo what they get; scopeproxy's response scrub masks the tokens it injected before the client sees them)"

step "https" "trust scopeproxy's local CA (never -k); the token is injected inside TLS:"
command_line "$SHOWN_BINARY ca --config $SHOWN_CONFIG > $SHOWN_CA"
"$BINARY" ca --config "$CONFIG" > "$DIR/scopeproxy-ca.pem" 2>"$RUN/ca.err" || fail "scopeproxy ca: $(cat "$RUN/ca.err")"
command_line "curl --cacert $SHOWN_CA -x $PROXY $SECURE_API/v1/me"
request secure-api --cacert "$DIR/scopeproxy-ca.pem" -x "$PROXY" "$SECURE_API/v1/me"
echo "$BODY"
received secure-api
expect_status 200
expect "the origin to receive the injected token" "$RECEIVED" '"authorization": "Bearer demo-api-token-123"'

step "placeholder" "the client holds a stand-in, the origin gets the value, nobody else gets anything:"
command_line "eval \"\$($SHOWN_BINARY env --config $SHOWN_CONFIG)\""
exports=$("$BINARY" env --config "$CONFIG" 2>"$RUN/env.err") || fail "scopeproxy env: $(cat "$RUN/env.err")"
eval "$exports"
echo "   GITHUB_TOKEN=${GITHUB_TOKEN:-}"
expect "scopeproxy env to export a placeholder" "${GITHUB_TOKEN:-}" "scopeproxy-ph-"
command_line "curl --cacert $SHOWN_CA -x $PROXY -H \"Authorization: token \$GITHUB_TOKEN\" $GITHUB/user"
request github --cacert "$DIR/scopeproxy-ca.pem" -x "$PROXY" -H "Authorization: token $GITHUB_TOKEN" "$GITHUB/user"
echo "$BODY"
received github
expect_status 200
expect "the github origin to receive the value in place of the placeholder" "$RECEIVED" '"authorization": "token demo-gh-token-789"'
echo "   the same placeholder sent to the api, which does not substitute it:"
command_line "curl -x $PROXY -H \"X-Token: \$GITHUB_TOKEN\" $API/v1/books"
request placeholder-refused -x "$PROXY" -H "X-Token: $GITHUB_TOKEN" "$API/v1/books"
echo "$BODY"
received api 0
expect_status 403
expect "the refusal to name its reason" "$BODY" "placeholder_out_of_scope"

step "OAuth2" "the proxy obtains a token from the partner's token endpoint (once) and injects it; the client holds nothing:"
command_line "curl -x $PROXY $PARTNER/v1/orders   (three times, at once)"
curls=()
for n in 1 2 3; do curl -sS -o "$RUN/partner.$n" -w '%{http_code}' -x "$PROXY" "$PARTNER/v1/orders" >"$RUN/partner.$n.status" 2>&1 & curls+=($!); done
for n in 1 2 3; do wait "${curls[$((n - 1))]}" || fail "request $n: curl failed: $(cat "$RUN/partner.$n.status")"; done
BODY=$(cat "$RUN/partner.1")
echo "$BODY"
received partner 3
for n in 1 2 3; do STATUS=$(cat "$RUN/partner.$n.status"); BODY=$(cat "$RUN/partner.$n"); expect_status 200; done
expect "the partner to receive the token the proxy obtained" "$RECEIVED" '"authorization": "Bearer demo-access-token-1"'
received token-endpoint 1
expect "the token endpoint to authenticate the proxy" "$RECEIVED" '"client_authenticated": true'

step "access log" "scopeproxy's access log (redacted):"
# Lines are written by the proxy's log thread just after each exchange, in order: once the last
# step's three lines are there, every earlier one is too.
deadline=$((SECONDS + READY_SECONDS))
until [ "$(grep -c '^{"ts".*/v1/orders' "$RUN/proxy.log")" -ge 3 ]; do
  [ $SECONDS -lt $deadline ] || fail "the log did not show the three partner requests within $READY_SECONDS s"
  sleep 0.1
done
ACCESS=$(grep '^{"ts"' "$RUN/proxy.log")
echo "$ACCESS"
expect "the api's line to show the injected token, the stripped X-API-Key and the redirect" "$ACCESS" \
  '"scope":"api","injected":["Authorization"],"stripped":["X-API-Key"],"redirect":{'
expect "the cdn's line to show its own token injected and the client's X-API-Key stripped" "$ACCESS" \
  '"scope":"cdn","injected":["X-CDN-Token"],"stripped":["X-API-Key"]'
expect "the refused placeholder's line" "$ACCESS" '"error":"placeholder_out_of_scope"'
for secret in "${SECRETS[@]}"; do refute "a secret value in scopeproxy's log" "$(cat "$RUN/proxy.log")" "$secret"; done

echo
echo "demo: every step showed what it claims."
if [ "$KEEP" = 1 ]; then
  echo
  echo "The demo keeps running (Ctrl-C stops it). From the repository root, in another terminal:"
  command_line "curl -x $PROXY -L -H \"X-API-Key: client-secret\" $API/download"
  command_line "curl --cacert $SHOWN_CA -x $PROXY $SECURE_API/v1/me"
  command_line "eval \"\$($SHOWN_BINARY env --config $SHOWN_CONFIG)\""
  command_line "curl --cacert $SHOWN_CA -x $PROXY -H \"Authorization: token \$GITHUB_TOKEN\" $GITHUB/user"
  command_line "tail -f $(show "$RUN/proxy.log")   # scopeproxy's log; each server's is beside it"
  wait "${PID[proxy]}" || true
else
  echo "make demo KEEP=1 leaves it running, to try the commands above by hand."
fi
