#!/usr/bin/env bash
# make demo: starts two demo origins and scopeproxy, sends one request the way a leaky client would
# (an X-API-Key header that curl -L carries across the redirect), and shows what each origin got and
# the proxy's redacted log lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
WORK=$(mktemp -d)
PIDS=()
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
# An https demo origin with its own CA (the proxy trusts it as upstream_ca).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/origin-ca.key" -out "$WORK/origin-ca.pem" \
  -days 1 -subj "/CN=demo origin CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$WORK/origin.key" -out "$WORK/origin.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' > "$WORK/origin.ext"
openssl x509 -req -in "$WORK/origin.csr" -CA "$WORK/origin-ca.pem" -CAkey "$WORK/origin-ca.key" -CAcreateserial \
  -out "$WORK/origin.pem" -days 1 -extfile "$WORK/origin.ext" 2>/dev/null
sed "s|\${DEMO_DIR}|$WORK|g" config/demo/demo.yaml > "$WORK/demo.yaml"

python3 config/demo/origin.py cdn 18766 2>"$WORK/origin-cdn.log" & PIDS+=($!)
python3 config/demo/origin.py api 18765 "http://127.0.0.1:18766/files/report.pdf" 2>"$WORK/origin-api.log" & PIDS+=($!)
python3 config/demo/origin.py secure-api 18767 - "$WORK/origin.pem" "$WORK/origin.key" 2>"$WORK/origin-secure-api.log" & PIDS+=($!)
python3 config/demo/origin.py github 18768 - "$WORK/origin.pem" "$WORK/origin.key" 2>"$WORK/origin-github.log" & PIDS+=($!)
python3 config/demo/token_endpoint.py 18769 demo-client demo-client-secret-000 2>"$WORK/token-endpoint.log" & PIDS+=($!)
python3 config/demo/origin.py partner 18770 2>"$WORK/origin-partner.log" & PIDS+=($!)
DEMO_API_TOKEN=demo-api-token-123 DEMO_CDN_TOKEN=demo-cdn-token-456 DEMO_GH_TOKEN=demo-gh-token-789 \
  DEMO_PARTNER_CLIENT_SECRET=demo-client-secret-000 \
  "$BINARY" run --config "$WORK/demo.yaml" --listen 127.0.0.1:18080 2>"$WORK/proxy.log" & PIDS+=($!)
for _ in $(seq 1 50); do grep -q "listening on" "$WORK/proxy.log" 2>/dev/null && break; sleep 0.1; done
sleep 0.3
echo "== curl -L through scopeproxy, with a client-side X-API-Key the app should never have sent to a CDN:"
echo '   curl -x http://127.0.0.1:18080 -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download'
curl -sS -x http://127.0.0.1:18080 -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download
echo "   what the cdn received (its own log): $(tail -1 "$WORK/origin-cdn.log")"
echo
echo "== the same without scopeproxy (what leaks today):"
curl -sS -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download
echo "   what the cdn received (its own log): $(tail -1 "$WORK/origin-cdn.log")"
echo
echo "== a direct call to the api through scopeproxy (token injected, client holds no secret):"
curl -sS -x http://127.0.0.1:18080 http://127.0.0.1:18765/v1/books?limit=5
echo "   what the api received (its own log): $(tail -1 "$WORK/origin-api.log")"
echo "   (the origins echo what they get; scopeproxy's response scrub masks the tokens it injected before the client sees them)"
echo
echo "== https: trust scopeproxy's local CA (never -k), and the token is injected inside TLS:"
"$BINARY" ca --config "$WORK/demo.yaml" > "$WORK/scopeproxy-ca.pem"
echo '   scopeproxy ca --config demo.yaml > scopeproxy-ca.pem'
echo '   curl --cacert scopeproxy-ca.pem -x http://127.0.0.1:18080 https://localhost:18767/v1/me'
curl -sS --cacert "$WORK/scopeproxy-ca.pem" -x http://127.0.0.1:18080 https://localhost:18767/v1/me
echo "   what the origin received (its own log): $(tail -1 "$WORK/origin-secure-api.log")"
echo
echo "== a placeholder: the client holds a stand-in, the origin gets the value, nobody else gets anything:"
echo '   eval "$(scopeproxy env --config demo.yaml)"'
eval "$("$BINARY" env --config "$WORK/demo.yaml")"
echo "   GITHUB_TOKEN=$GITHUB_TOKEN"
echo '   curl --cacert scopeproxy-ca.pem -x http://127.0.0.1:18080 -H "Authorization: token $GITHUB_TOKEN" https://localhost:18768/user'
curl -sS --cacert "$WORK/scopeproxy-ca.pem" -x http://127.0.0.1:18080 -H "Authorization: token $GITHUB_TOKEN" https://localhost:18768/user
echo "   what the origin received (its own log): $(tail -1 "$WORK/origin-github.log")"
echo '   the same placeholder sent to the api, which does not substitute it:'
echo '   curl -x http://127.0.0.1:18080 -H "X-Token: $GITHUB_TOKEN" http://127.0.0.1:18765/v1/books'
curl -sS -x http://127.0.0.1:18080 -H "X-Token: $GITHUB_TOKEN" http://127.0.0.1:18765/v1/books
echo
echo "== OAuth2: the proxy obtains a token from the partner's token endpoint (once) and injects it; the client holds nothing:"
echo '   curl -x http://127.0.0.1:18080 http://127.0.0.1:18770/v1/orders   (three times, at once)'
CURLS=()
for n in 1 2 3; do curl -sS -x http://127.0.0.1:18080 http://127.0.0.1:18770/v1/orders >"$WORK/partner.$n" & CURLS+=($!); done
wait "${CURLS[@]}"
cat "$WORK/partner.1"
echo "   what the partner received (its own log): $(tail -1 "$WORK/origin-partner.log")"
echo "   what the token endpoint saw (its own log): $(cat "$WORK/token-endpoint.log")"
echo
sleep 0.3
echo "== scopeproxy's access log (redacted):"
grep '^{"ts"' "$WORK/proxy.log" || true
