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
python3 config/demo/origin.py cdn 18766 & PIDS+=($!)
python3 config/demo/origin.py api 18765 "http://127.0.0.1:18766/files/report.pdf" & PIDS+=($!)
DEMO_API_TOKEN=demo-api-token-123 DEMO_CDN_TOKEN=demo-cdn-token-456 \
  "$BINARY" run --config config/demo/demo.yaml --listen 127.0.0.1:18080 2>"$WORK/proxy.log" & PIDS+=($!)
for _ in $(seq 1 50); do grep -q "listening on" "$WORK/proxy.log" 2>/dev/null && break; sleep 0.1; done
sleep 0.3
echo "== curl -L through scopeproxy, with a client-side X-API-Key the app should never have sent to a CDN:"
echo '   curl -x http://127.0.0.1:18080 -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download'
curl -sS -x http://127.0.0.1:18080 -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download
echo
echo "== the same without scopeproxy (what leaks today):"
curl -sS -L -H "X-API-Key: client-secret" http://127.0.0.1:18765/download
echo
echo "== a direct call to the api through scopeproxy (token injected, client holds no secret):"
curl -sS -x http://127.0.0.1:18080 http://127.0.0.1:18765/v1/books?limit=5
echo
sleep 0.3
echo "== scopeproxy's access log (redacted):"
grep '^{"ts"' "$WORK/proxy.log" || true
