#!/usr/bin/env bash
# make demo-credentials: two credentials the proxy obtains while the client holds nothing
# (docs/credentials.md). A `command:` secret (a stand-in for `gh auth token`: a script that prints a
# token and counts its runs) injected into a demo origin, and a GitHub App whose installation token
# comes from a local stand-in of GitHub's API (Tests/Fixtures/github_app_api.py, which verifies the
# app's RS256 JWT with PyJWT against the app's public key). It shows and checks that three
# concurrent requests run the command once, that each origin received its token, that the App's JWT
# was verified and its token reached the scoped API, and that the log holds neither value nor the
# key. Exit 1 names the first claim that did not hold.
#
#   SCOPEPROXY_BINARY   the binary (default .build/release/scopeproxy)
#   DEMO_DIR            where the demo writes (default ~/.cache/scopeproxy-demo; never the checkout)
#   DEMO_READY_SECONDS  how long each server may take to come up (default 30)
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "demo-credentials: $*" >&2; exit 1; }
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
READY_SECONDS=${DEMO_READY_SECONDS:-30}
DIR=${DEMO_DIR:-$HOME/.cache/scopeproxy-demo}
[ -x "$BINARY" ] || die "no scopeproxy binary at $BINARY (make release builds it; SCOPEPROXY_BINARY names another)"
for tool in curl python3 openssl; do command -v "$tool" >/dev/null || die "the demo needs $tool"; done
python3 -c 'import jwt, cryptography' 2>/dev/null || die "the GitHub stand-in needs PyJWT and cryptography (make packages-test installs them)"
case $DIR in /*) ;; *) die "DEMO_DIR must be an absolute path, not '$DIR'" ;; esac
mkdir -p "$DIR"
{ [ ! -L "$DIR" ] && [ -O "$DIR" ]; } || die "$DIR is not a directory of yours"
chmod 700 "$DIR"
RUN=$DIR/credentials-run
rm -rf "$RUN"
mkdir "$RUN"

declare -A PID
# SIGTERM, then SIGKILL for a server still there after 5 s (one started with SIGTERM blocked: a
# caller's signal mask is inherited, and the GitHub stand-in does not unblock it), as run.sh does.
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

# The GitHub stand-in serves until its stdin closes: a fifo this script holds open gives it one.
mkfifo "$RUN/hold"
exec 9<>"$RUN/hold"
start() {
  local name=$1; shift
  : > "$RUN/$name.log"
  "$@" <"$RUN/hold" >>"$RUN/$name.log" 2>&1 &
  PID[$name]=$!
}
until_true() {
  local what=$1 deadline=$((SECONDS + READY_SECONDS)); shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$what within $READY_SECONDS s; see $RUN"
    sleep 0.1
  done
}

# The app's key, as GitHub hands it out (the proxy holds it; the client never does).
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$RUN/app-key.pem" 2>/dev/null
chmod 600 "$RUN/app-key.pem"
openssl pkey -in "$RUN/app-key.pem" -pubout -out "$RUN/app-public.pem" 2>/dev/null

start github python3 -B Tests/Fixtures/github_app_api.py --public-key "$RUN/app-public.pem" --app-id 12345 \
  --installation 678 --log "$RUN/github-requests.log" --canary demo-ghs
start cli python3 -B config/demo/origin.py cli --port 0 --ready-file "$RUN/cli.port"
until_true "the GitHub stand-in did not start" grep -q '^[0-9][0-9]*$' "$RUN/github.log"
until_true "the cli origin did not start" test -s "$RUN/cli.port"
GITHUB=http://127.0.0.1:$(head -1 "$RUN/github.log")
CLI=http://127.0.0.1:$(cat "$RUN/cli.port")

# The stand-in for `gh auth token`: prints a token, and counts its runs.
CLI_TOKEN=demo-cli-token-$RANDOM$RANDOM
cat > "$RUN/gh-auth-token" <<EOF
#!/bin/sh
echo run >> "$RUN/command-runs"
echo $CLI_TOKEN
EOF
chmod 700 "$RUN/gh-auth-token"

cat > "$RUN/credentials.yaml" <<EOF
log: { output: stderr }
secrets:
  cli_token:
    command: ["$RUN/gh-auth-token"]     # in real life: ["gh", "auth", "token"]
    ttl: 10m
  app_key: { file: $RUN/app-key.pem }
  app_token:
    github_app:
      app_id: "12345"
      installation_id: "678"
      private_key: app_key
      api_url: "$GITHUB"                # in real life: the default, https://api.github.com
      permissions: { contents: read }
      repositories: [scopeproxy]
scopes:
  - name: cli-origin
    origins: ["$CLI"]
    inject: { Authorization: "Bearer \${cli_token}" }
  - name: github
    origins: ["$GITHUB"]
    paths: ["/repos/"]
    inject: { Authorization: "Bearer \${app_token}" }
EOF
start proxy "$BINARY" run --config "$RUN/credentials.yaml" --listen 127.0.0.1:0
until_true "scopeproxy did not start" grep -q '^listening on ' "$RUN/proxy.log"
PROXY=http://127.0.0.1:$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$RUN/proxy.log")

STEP=""
fail() { echo "demo-credentials: step \"$STEP\" failed: $*" >&2; exit 1; }
expect() { case $2 in *"$3"*) ;; *) fail "expected $1 ($3); got: ${2:-nothing}" ;; esac; }

echo "scopeproxy credential sources demo: the proxy on $PROXY, config $RUN/credentials.yaml:"
sed 's/^/   /' "$RUN/credentials.yaml"

STEP="command"
echo
echo "== a command secret: three requests at once, the command runs once"
echo "   curl -x $PROXY $CLI/whoami   (three at once; the client sends no credential)"
CURLS=()
for n in 1 2 3; do
  curl -sS -o "$RUN/cli-$n.body" -x "$PROXY" "$CLI/whoami" 2>"$RUN/cli-$n.curl" &
  CURLS+=($!)
done
for pid in "${CURLS[@]}"; do wait "$pid" || fail "curl: $(cat "$RUN"/cli-*.curl)"; done
for n in 1 2 3; do echo "   $(cat "$RUN/cli-$n.body")"; done
RUNS=$(wc -l < "$RUN/command-runs" 2>/dev/null || echo 0)
echo "   the command ran $RUNS time(s)"
[ "$RUNS" = 1 ] || fail "the command ran $RUNS times for three concurrent requests"
[ "$(grep -c "Bearer $CLI_TOKEN" "$RUN/cli.log" || true)" = 3 ] || fail "the cli origin did not receive the command's token three times"
echo "   the cli origin received Authorization: Bearer <the command's output> three times"
echo "   (the answers echo it back as stars: the response scrub replaced it on the way to the client)"

STEP="github app"
echo
echo "== a GitHub App: the proxy signs a JWT, gets an installation token, injects it"
echo "   curl -x $PROXY $GITHUB/repos/demo/scopeproxy"
BODY=$(curl -sS -x "$PROXY" "$GITHUB/repos/demo/scopeproxy") || fail "curl failed"
echo "   $BODY"
expect "the API's verdict" "$BODY" '"authorized": true'
TOKEN_REQUEST=$(grep '"kind": "access_tokens"' "$RUN/github-requests.log" | head -1)
expect "a token request whose JWT PyJWT verified" "$TOKEN_REQUEST" '"verified": true'
expect "the permissions asked for" "$TOKEN_REQUEST" '"permissions": {"contents": "read"}'
echo "   the stand-in verified the app's JWT (RS256, iss 12345) and issued token 1 for installation 678"

STEP="log"
echo
echo "== the log: what was injected, never the values"
until_true "the log did not show the GitHub request" grep -q '"scope":"github"' "$RUN/proxy.log"
grep '"scope":"github"' "$RUN/proxy.log" | head -1 | sed 's/^/   /'
LOG=$(cat "$RUN/proxy.log")
case $LOG in *"$CLI_TOKEN"*) fail "the command's token is in scopeproxy's log" ;; esac
case $LOG in *demo-ghs-*) fail "the installation token is in scopeproxy's log" ;; esac
KEY_LINE=$(sed -n 2p "$RUN/app-key.pem")
case $LOG in *"$KEY_LINE"*) fail "the app's key is in scopeproxy's log" ;; esac
echo
echo "demo-credentials: every step showed what it claims."
