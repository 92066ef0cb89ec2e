#!/usr/bin/env bash
# make demo-egress: an agent behind scopeproxy with `egress: default: deny`. Two demo origins on
# free ports (docs.example, allowed; paste.example, not listed), the proxy on a free port with a
# config written to DEMO_DIR/egress.yaml, and an agent-style client: curl identifying itself with a
# Bearer token in Proxy-Authorization. It shows and checks that the allowed origin answers, that the
# unlisted one gets a 403 JSON the agent can act on (error, destination, rule, client, hint) and
# never a connection, and the access log line that names the rule. Exit 1 names the first claim
# that did not hold.
#
#   SCOPEPROXY_BINARY   the binary (default .build/release/scopeproxy)
#   DEMO_DIR            where the demo writes (default ~/.cache/scopeproxy-demo; never the checkout)
#   DEMO_READY_SECONDS  how long each server may take to come up (default 30)
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "demo-egress: $*" >&2; exit 1; }
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
READY_SECONDS=${DEMO_READY_SECONDS:-30}
DIR=${DEMO_DIR:-$HOME/.cache/scopeproxy-demo}
[ -x "$BINARY" ] || die "no scopeproxy binary at $BINARY (make release builds it; SCOPEPROXY_BINARY names another)"
for tool in curl python3; do command -v "$tool" >/dev/null || die "the demo needs $tool"; done
case $DIR in /*) ;; *) die "DEMO_DIR must be an absolute path, not '$DIR'" ;; esac
mkdir -p "$DIR"
{ [ ! -L "$DIR" ] && [ -O "$DIR" ]; } || die "$DIR is not a directory of yours"
chmod 700 "$DIR"
RUN=$DIR/egress-run
rm -rf "$RUN"
mkdir "$RUN"

declare -A PID PORT
stop_servers() {
  local name
  for name in "${!PID[@]}"; do kill "${PID[$name]}" 2>/dev/null || true; done
  for name in "${!PID[@]}"; do wait "${PID[$name]}" 2>/dev/null || true; done
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() {
  local name=$1; shift
  : > "$RUN/$name.log"
  "$@" </dev/null >>"$RUN/$name.log" 2>&1 &
  PID[$name]=$!
}
# until_true WHAT COMMAND...: waits, at most READY_SECONDS, for COMMAND to succeed.
until_true() {
  local what=$1 deadline=$((SECONDS + READY_SECONDS)); shift
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$what within $READY_SECONDS s; see $RUN"
    sleep 0.1
  done
}

# The origins: python3 -B, so nothing is written into the checkout.
for name in docs paste; do
  start "$name" python3 -B config/demo/origin.py "$name" --port 0 --ready-file "$RUN/$name.port"
done
for name in docs paste; do
  until_true "the $name origin did not start" test -s "$RUN/$name.port"
  PORT[$name]=$(cat "$RUN/$name.port")
done

AGENT_KEY=demo-agent-key-$RANDOM$RANDOM
cat > "$RUN/egress.yaml" <<EOF
log: { output: stderr }
secrets: { agent_key: { env: DEMO_AGENT_KEY } }
clients:
  - name: agent
    auth: { bearer: agent_key }
    # Only what this agent's task needs; everything else is refused before any lookup.
    egress: { default: deny, allow: ["http://127.0.0.1:${PORT[docs]}"] }
egress: { default: deny }
EOF
start proxy env DEMO_AGENT_KEY="$AGENT_KEY" "$BINARY" run --config "$RUN/egress.yaml" --listen 127.0.0.1:0
until_true "scopeproxy did not start" grep -q '^listening on ' "$RUN/proxy.log"
PROXY=http://127.0.0.1:$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$RUN/proxy.log")
DOCS=http://127.0.0.1:${PORT[docs]}
PASTE=http://127.0.0.1:${PORT[paste]}

STEP=""
fail() { echo "demo-egress: step \"$STEP\" failed: $*" >&2; exit 1; }
request() {
  local name=$1; shift
  STATUS=$(curl -sS -o "$RUN/$name.body" -w '%{http_code}' "$@" 2>"$RUN/$name.curl") || fail "curl: $(cat "$RUN/$name.curl")"
  BODY=$(cat "$RUN/$name.body")
}
expect() { case $2 in *"$3"*) ;; *) fail "expected $1 ($3); got: ${2:-nothing}" ;; esac; }
requests_at() { grep -c '"origin"' "$RUN/$1.log" || true; }

echo "scopeproxy egress demo: the proxy on $PROXY, config $RUN/egress.yaml:"
sed 's/^/   /' "$RUN/egress.yaml"

STEP="allowed"
echo
echo "== allowed: the agent reaches the origin its egress lists"
echo "   curl -x $PROXY -H \"Proxy-Authorization: Bearer \$AGENT_KEY\" $DOCS/guide"
request allowed -x "$PROXY" -H "Proxy-Authorization: Bearer $AGENT_KEY" "$DOCS/guide"
echo "   HTTP $STATUS $BODY"
[ "$STATUS" = 200 ] || fail "expected HTTP 200, got $STATUS: $BODY"
expect "the docs origin's answer" "$BODY" '"origin": "docs"'

STEP="denied"
echo
echo "== denied: an unlisted host gets a 403 the agent can act on, and no connection"
echo "   curl -x $PROXY -H \"Proxy-Authorization: Bearer \$AGENT_KEY\" $PASTE/upload"
request denied -x "$PROXY" -H "Proxy-Authorization: Bearer $AGENT_KEY" "$PASTE/upload"
echo "   HTTP $STATUS $BODY"
[ "$STATUS" = 403 ] || fail "expected HTTP 403, got $STATUS: $BODY"
expect "the error code" "$BODY" '"error":"egress_denied"'
expect "the destination" "$BODY" "\"destination\":\"127.0.0.1:${PORT[paste]}\""
expect "the rule" "$BODY" '"rule":"default deny"'
expect "the client" "$BODY" '"client":"agent"'
expect "a hint naming the entry to add" "$BODY" "\\\"http://127.0.0.1:${PORT[paste]}\\\" to egress.allow of client 'agent'"
[ "$(requests_at paste)" = 0 ] || fail "the paste origin received a request"
echo "   the paste origin received: nothing"

STEP="access log"
echo
echo "== access log: the refusal's line names the rule"
until_true "the log did not show the refused request" grep -q '"error":"egress_denied"' "$RUN/proxy.log"
LINE=$(grep '"error":"egress_denied"' "$RUN/proxy.log")
echo "   $LINE"
expect "the egress object" "$LINE" '"egress":{"decision":"deny","rule":"default deny"'
case $(cat "$RUN/proxy.log") in *"$AGENT_KEY"*) fail "the agent's key is in scopeproxy's log" ;; esac
echo
echo "demo-egress: every step showed what it claims."
