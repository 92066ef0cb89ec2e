#!/usr/bin/env bash
# Side-by-side benchmark, one run, one table: a loopback nginx directly, through nginx as a plain relay
# (bench/lib.sh write_nginx_relay: the floor a forwarding proxy is measured against), and through scopeproxy (full:
# one scope injecting a token, JSON access log to a file, response scrub and egress guard on as by
# default; unguarded: the same with `scrub: off` and `guard: off`; engine: no scope, no access log), tinyproxy
# and squid. wrk rows (interleaved repeats, median), streamed uploads to bench/upload_sink.py
# (Content-Length and chunked), a download through a CONNECT tunnel; each cell is the ratio to direct
# with the proxy's CPU (from /proc/PID/stat). Then HTTP/2 from the client (bench/h2.sh: h2load, h2c to
# nginx and to scopeproxy, h2 over TLS to mitmdump as a reverse proxy). Then the TLS table of
# bench/tls_bench.py (scopeproxy next to mitmdump). The report goes to stdout and, newest on top, to
# bench/RESULTS.md.
#
# Pinning: the proxy under test runs on core 0, wrk, nginx, the upload sink and curl on core 1
# (2-core machines); every proxy has one thread/worker. Loopback only, every run bounded in time.
#   BENCH_DURATION=5 BENCH_REPEATS=3 BENCH_UPLOAD_MIB=1024 BENCH_TUNNEL_MIB=1024 bench/run.sh
#   BENCH_DURATION=1 BENCH_REPEATS=1 BENCH_UPLOAD_MIB=128 BENCH_TUNNEL_MIB=128 BENCH_H2_REQUESTS=20000 \
#     BENCH_H2_MITM_REQUESTS=1000 BENCH_WRITE_RESULTS=0 bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${BENCH_DURATION:-5}
REPEATS=${BENCH_REPEATS:-3}
CONNECTIONS=${BENCH_CONNECTIONS:-32}
UPLOAD_MIB=${BENCH_UPLOAD_MIB:-1024}
TUNNEL_MIB=${BENCH_TUNNEL_MIB:-1024}
TRANSFER_TIMEOUT=${BENCH_TRANSFER_TIMEOUT:-120}
WRITE_RESULTS=${BENCH_WRITE_RESULTS:-1}
RESULTS_FILE=${BENCH_RESULTS_FILE:-bench/RESULTS.md}
RUN_TLS=${BENCH_TLS:-1}
RUN_H2=${BENCH_H2:-1}
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
# The command line as typed, for the report: the BENCH_* settings in the environment, then the command.
COMMAND=$(for v in BENCH_DURATION BENCH_REPEATS BENCH_CONNECTIONS BENCH_UPLOAD_MIB BENCH_TUNNEL_MIB BENCH_TRANSFER_TIMEOUT \
  BENCH_H2 BENCH_H2_REQUESTS BENCH_H2_MITM_REQUESTS BENCH_H2_CONNECTIONS BENCH_H2_STREAMS BENCH_TLS BENCH_TLS_CLIENTS BENCH_TLS_DURATION BENCH_TLS_REPEATS SCOPEPROXY_BINARY; do
  [ -n "${!v:-}" ] && printf '%s=%s ' "$v" "${!v}"; done; echo "${BENCH_COMMAND:-bench/run.sh}")
source bench/lib.sh
start_workspace bench
# The machine's load when the run starts and ends: on a shared machine the absolute figures, and the
# ratios with them, move with what else runs (the report says so).
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
log() { echo "$*" >&2; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
size_label() { if [ $(($1 % 1024)) = 0 ]; then echo "$(($1 / 1024)) GiB"; else echo "$1 MiB"; fi; }
median() { sort -g | awk '{a[NR]=$1} END { print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) }'; }
[ -x "$BINARY" ] || { echo "no scopeproxy binary at $BINARY (swift build -c release)" >&2; exit 1; }

# --- origin: nginx, one worker, on core 1; the tunnel's download is a sparse file in its www; a second
# listener speaks h2c with prior knowledge only (nginx 1.22: `http2` without `ssl`) for the HTTP/2 rows ---
NGINX_PORT=$(free_port)
NGINX_H2_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT" "listen 127.0.0.1:$NGINX_H2_PORT http2;"
truncate -s "${TUNNEL_MIB}M" "$WORK/www/tunnel.bin"
taskset -c 1 nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"; wait_port "$NGINX_H2_PORT"

# --- proxies, each on core 0, one thread / worker ---
# nginx relay: the same origin, one header set (the token full injects); the upload sink's port is
# chosen now so the relay can route to it.
SINK_PORT=$(free_port)
# the sink listens from now on (idle until the uploads), so no connection of the wrk rows can take its port
taskset -c 1 python3 bench/upload_sink.py "$SINK_PORT" & PIDS+=($!)
wait_port "$SINK_PORT"
RELAY_PORT=$(free_port)
write_nginx_relay "$WORK" "$RELAY_PORT" "$NGINX_PORT" bench-token-0123456789 "$SINK_PORT"
taskset -c 0 nginx -c "$WORK/relay/nginx.conf" -p "$WORK/relay" & PIDS+=($!)
# full: one scope for the origin injecting a secret from the environment, the JSON access log to a file.
cat > "$WORK/full.yaml" <<YAML
secrets: { bench_token: { env: BENCH_TOKEN } }
scopes:
  - name: bench
    origins: ["http://127.0.0.1:$NGINX_PORT", "http://127.0.0.1:$NGINX_H2_PORT"]
    inject: { Authorization: "Bearer \${bench_token}" }
log: { output: $WORK/access.log }
tls: { tunnel: allow }
YAML
# unguarded: full without the response scrub and the egress guard (what they cost is the difference).
sed "s|$WORK/access.log|$WORK/access-unguarded.log|" "$WORK/full.yaml" > "$WORK/unguarded.yaml"
printf 'scrub: off\nguard: off\n' >> "$WORK/unguarded.yaml"
# engine: no scope; started with --no-access-log.
echo "tls: { tunnel: allow }" > "$WORK/engine.yaml"
for config in full unguarded engine; do
  "$BINARY" check --config "$WORK/$config.yaml" >"$WORK/check-$config.txt" 2>&1 \
    || { cat "$WORK/check-$config.txt" >&2; echo "scopeproxy check refused $WORK/$config.yaml" >&2; exit 1; }
done
FULL_PORT=$(free_port)
BENCH_TOKEN=bench-token-0123456789 taskset -c 0 "$BINARY" run --config "$WORK/full.yaml" --listen "127.0.0.1:$FULL_PORT" --threads 1 \
  >/dev/null 2>"$WORK/full.err" & FULL_PID=$!; PIDS+=($FULL_PID)
UNGUARDED_PORT=$(free_port)
BENCH_TOKEN=bench-token-0123456789 taskset -c 0 "$BINARY" run --config "$WORK/unguarded.yaml" --listen "127.0.0.1:$UNGUARDED_PORT" --threads 1 \
  >/dev/null 2>"$WORK/unguarded.err" & UNGUARDED_PID=$!; PIDS+=($UNGUARDED_PID)
ENGINE_PORT=$(free_port)
taskset -c 0 "$BINARY" run --config "$WORK/engine.yaml" --listen "127.0.0.1:$ENGINE_PORT" --threads 1 --no-access-log \
  >/dev/null 2>"$WORK/engine.err" & ENGINE_PID=$!; PIDS+=($ENGINE_PID)

# tinyproxy: with no ConnectPort line every port may be CONNECTed to; one line names the origin's port.
TINY_PORT=$(free_port)
cat > "$WORK/tinyproxy.conf" <<CONF
Port $TINY_PORT
Listen 127.0.0.1
Timeout 60
MaxClients 512
LogLevel Critical
Allow 127.0.0.1
DisableViaHeader Yes
ConnectPort $NGINX_PORT
CONF
taskset -c 0 tinyproxy -d -c "$WORK/tinyproxy.conf" >/dev/null 2>&1 & TINY_PID=$!; PIDS+=($TINY_PID)

# squid: no cache, no access log; localhost may do anything, CONNECT to the origin's port included
# (this config has no SSL_ports rule).
SQUID_PORT=$(free_port)
cat > "$WORK/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID_PORT
http_access allow localhost
http_access deny all
cache deny all
cache_mem 8 MB
access_log none
cache_log $WORK/squid-cache.log
pid_filename $WORK/squid.pid
coredump_dir $WORK
workers 1
shutdown_lifetime 0 seconds
CONF
taskset -c 0 squid -N -f "$WORK/squid.conf" >/dev/null 2>&1 & SQUID_PID=$!; PIDS+=($SQUID_PID)

wait_port "$RELAY_PORT"; wait_port "$FULL_PORT"; wait_port "$UNGUARDED_PORT"; wait_port "$ENGINE_PORT"; wait_port "$TINY_PORT"; wait_port "$SQUID_PORT"
# Measure the process that owns each listening socket (squid may run its worker as a child).
listener_pid() { ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | awk -F= 'NR == 1 {print $2}' || true; }
sleep 1
SQUID_WORKER=$(listener_pid "$SQUID_PORT"); SQUID_WORKER=${SQUID_WORKER:-$SQUID_PID}
# nginx's worker (the master only forks and waits): the listener's owner that is the master's child
RELAY_MASTER=$(cat "$WORK/relay/nginx.pid")
RELAY_WORKER=$(ps -o pid= --ppid "$RELAY_MASTER" | awk 'NR == 1 {print $1}')
[ -n "$RELAY_WORKER" ] || { echo "the nginx relay has no worker process" >&2; exit 1; }

PROXIES="relay full unguarded engine tinyproxy squid"
TARGETS="direct $PROXIES"
declare -A PORT_OF=([direct]=$NGINX_PORT [relay]=$RELAY_PORT [full]=$FULL_PORT [unguarded]=$UNGUARDED_PORT [engine]=$ENGINE_PORT [tinyproxy]=$TINY_PORT [squid]=$SQUID_PORT)
declare -A PID_OF=([direct]= [relay]=$RELAY_WORKER [full]=$FULL_PID [unguarded]=$UNGUARDED_PID [engine]=$ENGINE_PID [tinyproxy]=$TINY_PID [squid]=$SQUID_WORKER)

# Every proxy must carry a plain request and a CONNECT tunnel to the origin before anything is measured
# (nginx has no CONNECT).
for proxy in $PROXIES; do
  tunnels=("" -p); [ "$proxy" = relay ] && tunnels=("")
  for tunnel in "${tunnels[@]}"; do
    code=$(curl -sS $tunnel --max-time 10 -x "http://127.0.0.1:${PORT_OF[$proxy]}" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NGINX_PORT/1k" || true)
    [ "$code" = 200 ] || { echo "$proxy ${tunnel:+(CONNECT) }answered '$code' for the origin's /1k" >&2; exit 1; }
  done
done

# wrk speaks to a proxy with an absolute-form target set from Lua.
cat > "$WORK/proxy.lua" <<'LUA'
local target, close = os.getenv("BENCH_TARGET"), os.getenv("BENCH_CLOSE")
wrk.path = target
wrk.headers["Host"] = os.getenv("BENCH_HOST")
if close == "1" then wrk.headers["Connection"] = "close" end
LUA
cat > "$WORK/direct.lua" <<'LUA'
if os.getenv("BENCH_CLOSE") == "1" then wrk.headers["Connection"] = "close" end
LUA

# one wrk run: prints "req/s cpu-us/req" (cpu "-" for direct)
run_wrk() {
  local target=$1 size=$2 close=$3 port=${PORT_OF[$1]} pid=${PID_OF[$1]} before after out requests rps cpu=-
  export BENCH_TARGET="http://127.0.0.1:$NGINX_PORT/$size" BENCH_HOST="127.0.0.1:$NGINX_PORT" BENCH_CLOSE=$close
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  if [ "$target" = direct ]; then
    out=$(taskset -c 1 timeout --foreground $((DURATION + 30)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/direct.lua" "http://127.0.0.1:$port/$size")
  else
    out=$(taskset -c 1 timeout --foreground $((DURATION + 30)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/proxy.lua" "http://127.0.0.1:$port")
  fi
  [ -n "$pid" ] && after=$(cpu_ticks "$pid")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  local non2xx; non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  local errors; errors=$(awk '/Socket errors/ {print}' <<<"$out")
  [ "$non2xx" != 0 ] && log "warning: $target $size close=$close: $non2xx non-2xx responses"
  [ -n "$errors" ] && [ "$close" = 0 ] && log "note: $target $size: $errors"
  [ -n "$pid" ] && cpu=$(awk -v t=$((after - before)) -v r="$requests" -v u=$TICK_US 'BEGIN { printf "%.1f", (r > 0 ? t * u / r : 0) }')
  echo "${rps:-0} $cpu"
}

# one transfer: prints "MB/s cpu-seconds" (cpu "-" for direct), or "fail -"
transfer() {
  local target=$1 kind=$2 pid=${PID_OF[$1]} before after args=(-sS --max-time "$TRANSFER_TIMEOUT") out expected got
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  case $kind in
    content-length|chunked)
      # no `Expect: 100-continue` (curl adds it above 1 MiB; the sink never answers 100, so curl would
      # wait its 1 s timeout first)
      args+=(-H "Expect:" -T "$WORK/upload.bin" -o "$WORK/sink.out" -w '%{http_code} %{speed_upload} %{size_upload}')
      [ "$kind" = chunked ] && args+=(-H "Transfer-Encoding: chunked")
      [ "$target" != direct ] && args+=(-x "http://127.0.0.1:${PORT_OF[$target]}")
      expected=$((UPLOAD_MIB * 1048576)); : > "$WORK/sink.out"
      out=$(taskset -c 1 curl "${args[@]}" "http://127.0.0.1:$SINK_PORT/upload" 2>>"$WORK/curl.err") || true
      # the sink counts what arrives after the head: the body, or for chunked the body and its framing
      got=$(cat "$WORK/sink.out"); [ "$kind" = chunked ] && [ "${got:-0}" -ge "$expected" ] 2>/dev/null && got=$expected ;;
    tunnel)
      args+=(-o /dev/null -w '%{http_code} %{speed_download} %{size_download}')
      [ "$target" != direct ] && args+=(-p -x "http://127.0.0.1:${PORT_OF[$target]}")
      expected=$((TUNNEL_MIB * 1048576))
      out=$(taskset -c 1 curl "${args[@]}" "http://127.0.0.1:$NGINX_PORT/tunnel.bin" 2>>"$WORK/curl.err") || true
      got=$(awk '{print $3}' <<<"$out") ;;
  esac
  [ -n "$pid" ] && after=$(cpu_ticks "$pid")
  if [ "$(awk '{print $1}' <<<"$out")" != 200 ] || [ "$got" != "$expected" ]; then
    log "warning: $target $kind failed: curl '$out', $got of $expected bytes arrived ($(tail -1 "$WORK/curl.err" 2>/dev/null))"
    echo "fail -"; return
  fi
  awk -v s="$(awk '{print $2}' <<<"$out")" -v t="${after:-0}" -v b="${before:-0}" -v u=$TICK_US -v d="$([ -n "$pid" ] && echo 0 || echo 1)" \
    'BEGIN { if (d) printf "%.0f -\n", s / 1e6; else printf "%.0f %.2f\n", s / 1e6, (t - b) * u / 1e6 }'
}

log "scopeproxy benchmark: wrk -t1 -c$CONNECTIONS -d${DURATION}s, median of $REPEATS interleaved runs; $(size_label "$UPLOAD_MIB") uploads, $(size_label "$TUNNEL_MIB") tunnel"
declare -A RESULT
WRK_WORK="keepalive/1k close/1k keepalive/64k keepalive/1m"
for work in $WRK_WORK; do
  mode=${work%/*}; size=${work#*/}; close=0; [ "$mode" = close ] && close=1
  for repeat in $(seq 1 "$REPEATS"); do
    for target in $TARGETS; do
      log "  wrk $mode $size $target (run $repeat of $REPEATS)"
      RESULT["$work/$target/$repeat"]=$(run_wrk "$target" "$size" "$close")
    done
  done
done

# --- uploads to the sink and the tunnel download; RSS from here on ---
truncate -s "${UPLOAD_MIB}M" "$WORK/upload.bin"
declare -A RSS_BEFORE HWM_WRK HWM_UPLOADS HWM_END
for proxy in $PROXIES; do
  pid=${PID_OF[$proxy]}
  RSS_BEFORE[$proxy]=$(status_kib "$pid" VmRSS); HWM_WRK[$proxy]=$(status_kib "$pid" VmHWM)
  # reset the peak so VmHWM after the uploads is the uploads' own peak (5: reset the peak RSS)
  { echo 5 > "/proc/$pid/clear_refs"; } 2>/dev/null || log "note: cannot reset $proxy's VmHWM; the upload peak includes the wrk runs"
done
# untimed: the first read of a sparse file fills the page cache (the first transfer ran at a fraction of the others)
log "  warm-up: one direct upload, one direct download"
transfer direct content-length >/dev/null; transfer direct tunnel >/dev/null
for kind in content-length chunked; do
  for repeat in $(seq 1 "$REPEATS"); do
    for target in $TARGETS; do
      log "  $(size_label "$UPLOAD_MIB") upload $kind $target (run $repeat of $REPEATS)"
      RESULT["upload-$kind/$target/$repeat"]=$(transfer "$target" "$kind")
    done
  done
done
for proxy in $PROXIES; do HWM_UPLOADS[$proxy]=$(status_kib "${PID_OF[$proxy]}" VmHWM); done
for repeat in $(seq 1 "$REPEATS"); do
  for target in $TARGETS; do
    # nginx has no CONNECT: its cell says so
    if [ "$target" = relay ]; then RESULT["tunnel/$target/$repeat"]="- -"; continue; fi
    log "  $(size_label "$TUNNEL_MIB") download, CONNECT tunnel, $target (run $repeat of $REPEATS)"
    RESULT["tunnel/$target/$repeat"]=$(transfer "$target" tunnel)
  done
done
for proxy in $PROXIES; do HWM_END[$proxy]=$(status_kib "${PID_OF[$proxy]}" VmHWM); done
# the full proxy did inject (its log is written in batches: most lines are there by now)
INJECTED=$(grep -c '"injected":\["Authorization"\]' "$WORK/access.log" || true)
log "scopeproxy full: $(wc -l < "$WORK/access.log") access log lines so far, $INJECTED with Authorization injected"
[ "${INJECTED:-0}" -gt 0 ] || log "warning: scopeproxy full logged no injection: check $WORK/full.yaml"

# --- HTTP/2 from the client (h2load; its own table) ---
if [ "$RUN_H2" = 1 ]; then source bench/h2.sh; fi

# --- the table ---
# median of column N over the repeats of WORK/TARGET ("fail" if any repeat failed, "-" when absent)
col() {
  local values; values=$(for r in $(seq 1 "$REPEATS"); do echo "${RESULT[$1/$2/$r]}" | cut -d' ' -f"$3"; done)
  if grep -q fail <<<"$values"; then echo fail; elif grep -qx -- - <<<"$values"; then echo -; else median <<<"$values"; fi
}
cell() {  # WORK TARGET UNIT(req/s|MB/s) -> "ratio (cpu)" or, for direct, "1.00 (absolute unit)"
  local work=$1 target=$2 unit=$3 value direct cpu
  value=$(col "$work" "$target" 1); direct=$(col "$work" direct 1)
  if [ "$value" = fail ]; then echo "failed"; return; fi
  if [ "$value" = - ]; then echo "n/a"; return; fi
  if [ "$target" = direct ]; then awk -v v="$value" -v u="$unit" 'BEGIN { printf "1.00 (%.0f %s)", v, u }'; return; fi
  cpu=$(col "$work" "$target" 2)
  awk -v v="$value" -v d="$direct" -v c="$cpu" -v u="$unit" 'BEGIN {
    # below 0.01 two decimals would print 0.00 (mitmdump on the HTTP/2 row): three then
    ratio = (d == "fail" || d == 0) ? "-" : sprintf(v / d < 0.01 ? "%.3f" : "%.2f", v / d)
    if (u == "req/s") cpu = (c >= 100 ? sprintf("%.0f", c) : sprintf("%.1f", c)); else cpu = sprintf("%.2f", c)
    printf "%s (%s)", ratio, cpu }'
}
declare -A LABEL=(
  [keepalive/1k]="1 KiB keep-alive, × direct (proxy CPU µs/req)"
  [close/1k]="1 KiB new connection per request (CPU µs/req)"
  [keepalive/64k]="64 KiB keep-alive (CPU µs/req)"
  [keepalive/1m]="1 MiB keep-alive (CPU µs/req)"
  [upload-content-length]="$(size_label "$UPLOAD_MIB") upload, Content-Length (proxy CPU s)"
  [upload-chunked]="$(size_label "$UPLOAD_MIB") upload, chunked (CPU s)"
  [tunnel]="CONNECT tunnel, $(size_label "$TUNNEL_MIB") download (CPU s)"
)
table() {
  echo "| work | direct | nginx relay | scopeproxy full | full, scrub + guard off | scopeproxy engine | tinyproxy | squid |"
  echo "|---|---|---|---|---|---|---|---|"
  local work unit target line
  for work in $WRK_WORK upload-content-length upload-chunked tunnel; do
    unit=req/s; case $work in upload*|tunnel) unit=MB/s ;; esac
    line="| ${LABEL[$work]} |"
    for target in $TARGETS; do line+=" $(cell "$work" "$target" "$unit") |"; done
    echo "$line"
  done
}
# The per-request cost targets as ratios within this run, each with its verdict.
targets() {
  ratio() {  # A B TARGET(<=x|>=x) -> "A÷B (target ..., met|not met)", or "-" when a value is missing
    awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN {
      if (a == "" || b == "" || a == "-" || b == "-" || a == "fail" || b == "fail" || b == 0) { print "- (" t ")"; exit }
      r = a / b; bound = substr(t, 3) + 0
      ok = (substr(t, 1, 2) == "<=") ? (r <= bound) : (r >= bound)
      printf "%.2f (target %s %s, %s)", r, (substr(t, 1, 2) == "<=" ? "≤" : "≥"), substr(t, 3), (ok ? "met" : "not met") }'
  }
  echo "Targets, ratios within this run:"
  echo "- 1 KiB keep-alive, proxy CPU per request ÷ nginx relay: full $(ratio "$(col keepalive/1k full 2)" "$(col keepalive/1k relay 2)" '<=1.2'), engine $(ratio "$(col keepalive/1k engine 2)" "$(col keepalive/1k relay 2)" '<=1.0'); full throughput ÷ direct $(ratio "$(col keepalive/1k full 1)" "$(col keepalive/1k direct 1)" '>=0.8')."
  echo "- Throughput ÷ direct with scrub and guard on (full): 64 KiB $(ratio "$(col keepalive/64k full 1)" "$(col keepalive/64k direct 1)" '>=0.8'), 1 MiB $(ratio "$(col keepalive/1m full 1)" "$(col keepalive/1m direct 1)" '>=0.8')."
  local kind
  for kind in content-length chunked; do
    echo "- Upload, $kind, full: ÷ direct $(ratio "$(col "upload-$kind" full 1)" "$(col "upload-$kind" direct 1)" '>=0.9'), ÷ tinyproxy $(ratio "$(col "upload-$kind" full 1)" "$(col "upload-$kind" tinyproxy 1)" '>=1.2'); engine: ÷ direct $(ratio "$(col "upload-$kind" engine 1)" "$(col "upload-$kind" direct 1)" '>=0.9'), ÷ tinyproxy $(ratio "$(col "upload-$kind" engine 1)" "$(col "upload-$kind" tinyproxy 1)" '>=1.2')."
  done
}
rss_line() {
  local proxy out="" peak
  local -A names=([relay]="nginx relay" [full]="scopeproxy full" [unguarded]="full, scrub + guard off" [engine]="scopeproxy engine" [tinyproxy]=tinyproxy [squid]=squid)
  for proxy in $PROXIES; do out+="${out:+; }${names[$proxy]} $(mib "${RSS_BEFORE[$proxy]}") → $(mib "${HWM_UPLOADS[$proxy]}")"; done
  echo "RSS during the uploads, MiB (VmRSS before → VmHWM after): $out."
  out=""
  for proxy in $PROXIES; do
    peak=${HWM_WRK[$proxy]}; [ "${HWM_END[$proxy]}" -gt "$peak" ] && peak=${HWM_END[$proxy]}
    out+="${out:+; }${names[$proxy]} $(mib "$peak")"
  done
  echo "Peak RSS over the whole run, MiB (VmHWM): $out."
}

versions() {
  local nginx tiny squid wrk curl h2load mitm
  nginx=$(nginx -v 2>&1 | sed 's|.*nginx/||' || true); tiny=$(tinyproxy -v 2>&1 | awk '{print $2}' || true)
  squid=$(squid -v 2>&1 | awk '/Version/ {print $NF}' || true); wrk=$(wrk -v 2>&1 | awk '/^wrk/ {print $2}' || true)
  curl=$(curl --version 2>&1 | awk 'NR == 1 {print $2}' || true); h2load=$(h2load --version 2>&1 | awk '{print $2}' | sed 's|.*/||' || true)
  mitm=$(mitmdump --version 2>/dev/null | awk '/^Mitmproxy/ {print $2}' || true)
  echo "nginx $nginx, tinyproxy $tiny, squid $squid, wrk $wrk, curl $curl, h2load $h2load${mitm:+, mitmdump $mitm}"
}
commit() {
  local head dirty=""
  head=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  [ -n "$(git status --porcelain -- Sources Package.swift Package.resolved 2>/dev/null)" ] && dirty=" with uncommitted changes under Sources/"
  if [ "$BINARY" = .build/release/scopeproxy ]; then echo "$BINARY built from commit $head$dirty"; else echo "$BINARY (tree at commit $head$dirty)"; fi
}

REPORT="$WORK/report.md"
{
  echo "## Latest run ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "Machine: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores (nproc), Linux $(uname -r);"
  echo "load average (1, 5, 15 min) $LOAD_START at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end of the HTTP/1.1 and HTTP/2 rows."
  echo "Binary: $(commit). Versions: $(versions)."
  echo
  echo "Command: \`$COMMAND\`"
  echo
  echo "Proxy on core 0 (the nginx relay and scopeproxy with one worker, \`--threads 1\`, tinyproxy, squid \`workers 1\`), wrk + nginx (1 worker) + upload sink + curl on core 1;"
  echo "loopback. wrk -t1 -c$CONNECTIONS -d${DURATION}s; every cell the median of $REPEATS interleaved runs. Each cell: throughput ÷ direct"
  echo "(the direct cell gives the absolute figure), with the proxy's CPU (user + system, /proc/PID/stat) in parentheses: µs per request"
  echo "for wrk rows, seconds for the whole transfer below. scopeproxy full: one scope injecting \`Authorization: Bearer \${bench_token}\`"
  echo "into the origin's requests, JSON access log to a file, response scrub and egress guard on (the defaults); \"scrub + guard off\":"
  echo "the same with \`scrub: off\` and \`guard: off\`; engine: no scope, \`--no-access-log\`. Uploads: \`curl -T\` of a sparse"
  echo "file to bench/upload_sink.py, without \`Expect: 100-continue\`; tunnel: \`curl -p -x PROXY\` of a sparse file from nginx."
  echo "nginx relay: nginx as a plain HTTP/1.1 relay (keep-alive upstream pool, the same Authorization set as one header, buffering off"
  echo "both ways, no access log; bench/lib.sh write_nginx_relay); it has no CONNECT."
  echo
  table
  echo
  targets
  echo
  rss_line
  if [ "$RUN_H2" = 1 ]; then echo; h2_report; fi
} > "$REPORT"

if [ "$RUN_TLS" = 1 ]; then
  log "TLS: scopeproxy and mitmdump intercepting one HTTPS origin (bench/tls_bench.py)"
  # in the background so that the cleanup can end it (and its mitmdump) on Ctrl-C or an error
  python3 bench/tls_bench.py > "$WORK/tls.md" & TLS_PID=$!; PIDS+=($TLS_PID)
  if wait "$TLS_PID"; then { echo; cat "$WORK/tls.md"; } >> "$REPORT"
  else log "warning: bench/tls_bench.py failed"; { echo; echo "TLS: bench/tls_bench.py failed in this run."; } >> "$REPORT"; fi
fi

echo
cat "$REPORT"
if [ "$WRITE_RESULTS" = 1 ]; then
  python3 bench/write_results.py "$RESULTS_FILE" "$REPORT"
  log "written to $RESULTS_FILE (newest on top; BENCH_WRITE_RESULTS=0 skips this)"
fi
