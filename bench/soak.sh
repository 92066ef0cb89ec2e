#!/usr/bin/env bash
# Soak: SOAK_SECONDS (default 300) of mixed load through scopeproxy on loopback, RSS sampled every
# SOAK_SAMPLE seconds, then a verdict on the memory trend. Loads, all at once:
#   - keep-alive GETs of 1 KiB (wrk, 32 connections) to a scoped origin: token injected, log written;
#   - a new connection per request, 64 KiB responses (wrk, 8 connections, Connection: close);
#   - 64 KiB uploads (wrk POST, 4 connections);
#   - redirects the proxy follows itself (wrk, 4 connections);
#   - hostile clients (bench/soak_chaos.py): malformed and ambiguous heads, numbers too long to hold,
#     requests to the proxy's own ports, an origin with two Locations, refused upstreams, clients that
#     vanish mid-head, mid-body and mid-response, slowly streamed bodies, idle connections left open,
#     pipelined bursts; each checks the one answer it must get.
# Exits 1 when any hostile client got an unexpected answer (the chaos lines say which), when RSS
# keeps growing (the last third's mean more than 10% + 2 MiB over the middle third's), on a token in
# the log, a sanitizer report or an unclean exit.
#   SOAK_SECONDS=300 SOAK_SAMPLE=10 bench/soak.sh        (make soak)
#   SCOPEPROXY_BINARY=.build/asan/debug/scopeproxy ...    (make leak-check runs it under ASan/LSan)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TOTAL=${SOAK_SECONDS:-300}
SAMPLE=${SOAK_SAMPLE:-10}
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
source bench/lib.sh
start_workspace soak
metric_sum() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v name="$1" '$1 == name || index($1, name "{") == 1 { sum += $2 } END { printf "%d", sum }'; }

# --- origin: nginx with static files, an upload sink and a redirect ---
NGINX_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT" "client_max_body_size 1m;
    location /upload { client_body_buffer_size 128k; return 200 \"stored\\n\"; }
    location /redirect { return 302 http://127.0.0.1:$NGINX_PORT/1k; }"
head -c 65536 /dev/urandom > "$WORK/upload.bin"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"

# --- the proxy: a scope with an injected token, follow mode, JSON log to a file, admin endpoint ---
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
cat > "$WORK/soak.yaml" <<CONF
admin: "127.0.0.1:$ADMIN_PORT"
secrets:
  soak_token: { env: SOAK_TOKEN }
scopes:
  - name: origin
    origins: ["http://127.0.0.1:$NGINX_PORT"]
    require_https: false
    inject: { Authorization: "Bearer \${soak_token}" }
redirects: { cross_origin: follow, max_hops: 3 }
# Tunnels allowed, so a CONNECT to the proxy's own port reaches the check that refuses it
# (loop_refused) instead of the tunnel policy.
tls: { tunnel: allow }
timeouts: { idle: 5s, client_header: 2s, upstream: 5s }
limits: { max_connections: 4000 }
log: { output: $WORK/access.log }
CONF
SOAK_TOKEN="soak-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
  "$BINARY" run --config "$WORK/soak.yaml" --listen "127.0.0.1:$PROXY_PORT" 2>"$WORK/proxy.err" & PROXY_PID=$!; PIDS+=($PROXY_PID)
wait_port "$PROXY_PORT"
wait_port "$ADMIN_PORT"

cat > "$WORK/get.lua" <<'LUA'
wrk.path = os.getenv("SOAK_TARGET")
wrk.headers["Host"] = os.getenv("SOAK_HOST")
if os.getenv("SOAK_CLOSE") == "1" then wrk.headers["Connection"] = "close" end
LUA
cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.path = os.getenv("SOAK_TARGET")
wrk.headers["Host"] = os.getenv("SOAK_HOST")
wrk.headers["Content-Type"] = "application/octet-stream"
local file = io.open(os.getenv("SOAK_BODY"), "rb"); wrk.body = file:read("*a"); file:close()
LUA
ORIGIN="http://127.0.0.1:$NGINX_PORT"
load() {  # name connections script target close
  SOAK_TARGET="$ORIGIN/$4" SOAK_HOST="127.0.0.1:$NGINX_PORT" SOAK_CLOSE="$5" SOAK_BODY="$WORK/upload.bin" \
    wrk -t1 -c"$2" -d"${SECONDS_TOTAL}s" --timeout 10s -s "$WORK/$3" "http://127.0.0.1:$PROXY_PORT" > "$WORK/wrk-$1.txt" 2>&1 &
  PIDS+=($!)
}
load keepalive-1k 32 get.lua 1k 0
load close-64k 8 get.lua 64k 1
load upload-64k 4 post.lua upload 0
load redirect-follow 4 get.lua redirect 0
python3 bench/soak_chaos.py --proxy "127.0.0.1:$PROXY_PORT" --origin "127.0.0.1:$NGINX_PORT" --admin "127.0.0.1:$ADMIN_PORT" \
  --seconds "$SECONDS_TOTAL" > "$WORK/chaos.txt" 2>&1 & CHAOS_PID=$!; PIDS+=($CHAOS_PID)

echo "soak: ${SECONDS_TOTAL}s of mixed load through $BINARY ($(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ))"
printf "%8s %10s %6s %8s %12s\n" "t(s)" "RSS(KiB)" "fds" "clients" "requests"
SAMPLES=()
start=$(date +%s)
while true; do
  now=$(( $(date +%s) - start ))
  [ "$now" -le "$SECONDS_TOTAL" ] || break
  kill -0 "$PROXY_PID" 2>/dev/null || { echo "the proxy died"; cat "$WORK/proxy.err"; exit 1; }
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$PROXY_PID/status")
  fds=$(ls "/proc/$PROXY_PID/fd" | wc -l)
  printf "%8d %10d %6d %8d %12d\n" "$now" "$rss" "$fds" "$(metric_sum scopeproxy_client_connections)" "$(metric_sum scopeproxy_requests_total)"
  SAMPLES+=("$now:$rss")
  sleep "$SAMPLE"
done
wait_loads() { for _ in $(seq 1 100); do pgrep -f "$WORK/.*\.lua" >/dev/null || return 0; sleep 0.2; done; }
wait_loads
CHAOS_STATUS=0
wait "$CHAOS_PID" || CHAOS_STATUS=$?
sleep 1

echo
echo "load results:"
for file in "$WORK"/wrk-*.txt; do
  name=$(basename "$file" .txt); name=${name#wrk-}
  requests=$(awk '/requests in/ {print $1}' "$file")
  rps=$(awk '/Requests\/sec/ {print $2}' "$file")
  errors=$(awk '/Socket errors|Non-2xx/ {printf "%s ", $0}' "$file")
  printf "  %-16s %10s requests %10s req/s  %s\n" "$name" "${requests:-?}" "${rps:-?}" "${errors:-no errors}"
done
echo "  chaos: $(tail -1 "$WORK/chaos.txt")"
grep "^unexpected: " "$WORK/chaos.txt" | sed 's/^/    /' || true
echo "  proxy: $(metric_sum scopeproxy_requests_total) requests logged by status class: $(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^scopeproxy_requests_total\{/ {printf "%s ", $0}')"
echo "  log lines: $(wc -l < "$WORK/access.log"), dropped: $(metric_sum scopeproxy_log_lines_dropped_total), tripwire hits: $(metric_sum scopeproxy_log_tripwire_hits_total)"
if grep -q "soak-" "$WORK/access.log" "$WORK/proxy.err"; then echo "FAIL: the injected token appears in the log"; exit 1; fi

# Memory trend: middle third vs last third of the samples (the first third is warm-up).
python3 - "${SAMPLES[@]}" <<'PY'
import sys
samples = [tuple(map(int, s.split(":"))) for s in sys.argv[1:]]
third = max(1, len(samples) // 3)
middle = [rss for _, rss in samples[third:2 * third]] or [samples[-1][1]]
last = [rss for _, rss in samples[2 * third:]] or [samples[-1][1]]
mean = lambda values: sum(values) / len(values)
xs = [t for t, _ in samples[third:]]; ys = [r for _, r in samples[third:]]
slope = 0.0
if len(xs) > 1:
    mx, my = mean(xs), mean(ys)
    denominator = sum((x - mx) ** 2 for x in xs) or 1
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / denominator * 60
peak = max(rss for _, rss in samples)
print(f"RSS: start {samples[0][1]} KiB, peak {peak} KiB, middle third mean {mean(middle):.0f} KiB, "
      f"last third mean {mean(last):.0f} KiB, slope after warm-up {slope:+.1f} KiB/min")
import os
if os.environ.get("SCOPEPROXY_SANITIZED"):
    print("(sanitized build: freed memory sits in quarantine, so RSS is not judged; LeakSanitizer is)")
    sys.exit(0)
if mean(last) > mean(middle) * 1.10 + 2048:
    print("FAIL: RSS is still growing")
    sys.exit(1)
print("no growth trend")
PY
kill -TERM "$PROXY_PID"
for _ in $(seq 1 100); do kill -0 "$PROXY_PID" 2>/dev/null || break; sleep 0.1; done
wait "$PROXY_PID" 2>/dev/null && status=0 || status=$?
echo "proxy exit status after SIGTERM: $status"
grep -E "LeakSanitizer|AddressSanitizer|ThreadSanitizer" -A30 "$WORK/proxy.err" | head -60 || true
if grep -qE "ERROR: (LeakSanitizer|AddressSanitizer)|WARNING: ThreadSanitizer" "$WORK/proxy.err"; then echo "FAIL: sanitizer report"; exit 1; fi
[ "$status" = 0 ] || { echo "FAIL: the proxy did not exit cleanly"; tail -20 "$WORK/proxy.err"; exit 1; }
# Last, so that the memory verdict and the exit are reported too: a hostile client that got another
# answer than the one it must get fails the soak, whatever else went well.
if [ "$CHAOS_STATUS" != 0 ]; then
  echo "FAIL: hostile clients got unexpected answers (exit $CHAOS_STATUS): $(tail -1 "$WORK/chaos.txt")"
  exit 1
fi
echo "PASS: every answer as expected, no growth trend, clean exit"
