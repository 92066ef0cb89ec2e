#!/usr/bin/env bash
# Side-by-side benchmark, one run: wrk against nginx directly and through scopeproxy, tinyproxy and
# squid, interleaved and repeated (median of the repeats), then a 1 GiB upload. Prints req/s,
# p50/p99 latency, proxy CPU-µs per request, peak RSS and the ratios.
#
# Pinning: the proxy under test runs on core 0, wrk and nginx on core 1 (2-core machines).
# Loopback only, every run bounded by BENCH_DURATION.
#   BENCH_DURATION=5 BENCH_REPEATS=3 BENCH_SIZES="1k 64k 1m" bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${BENCH_DURATION:-5}
REPEATS=${BENCH_REPEATS:-3}
SIZES=${BENCH_SIZES:-"1k 64k 1m"}
CONNECTIONS=${BENCH_CONNECTIONS:-32}
UPLOAD_MIB=${BENCH_UPLOAD_MIB:-1024}
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
source bench/lib.sh
start_workspace bench
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
peak_rss_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# --- origin: nginx, one worker, on core 1 ---
NGINX_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT"
taskset -c 1 nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"

# --- proxies, each on core 0 ---
SCOPE_PORT=$(free_port)
taskset -c 0 "$BINARY" run --listen "127.0.0.1:$SCOPE_PORT" --threads 1 >/dev/null 2>"$WORK/scopeproxy.err" & SCOPE_PID=$!; PIDS+=($SCOPE_PID)
# The same proxy without its access log (JSON lines to /dev/null above): the difference is the log's cost.
NOLOG_PORT=$(free_port)
taskset -c 0 "$BINARY" run --listen "127.0.0.1:$NOLOG_PORT" --threads 1 --no-access-log >/dev/null 2>&1 & NOLOG_PID=$!; PIDS+=($NOLOG_PID)

TINY_PORT=$(free_port)
cat > "$WORK/tinyproxy.conf" <<CONF
Port $TINY_PORT
Listen 127.0.0.1
Timeout 60
MaxClients 512
LogLevel Critical
Allow 127.0.0.1
DisableViaHeader Yes
CONF
taskset -c 0 tinyproxy -d -c "$WORK/tinyproxy.conf" >/dev/null 2>&1 & TINY_PID=$!; PIDS+=($TINY_PID)

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

wait_port "$SCOPE_PORT"; wait_port "$NOLOG_PORT"; wait_port "$TINY_PORT"; wait_port "$SQUID_PORT"
# Measure the process that owns each listening socket (squid may run its worker as a child).
listener_pid() { ss -ltnpH "sport = :$1" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; }
sleep 1
SQUID_WORKER=$(listener_pid "$SQUID_PORT"); SQUID_WORKER=${SQUID_WORKER:-$SQUID_PID}

declare -A PORT_OF=([direct]=$NGINX_PORT [scopeproxy]=$SCOPE_PORT [scope-nolog]=$NOLOG_PORT [tinyproxy]=$TINY_PORT [squid]=$SQUID_PORT)
declare -A PID_OF=([direct]= [scopeproxy]=$SCOPE_PID [scope-nolog]=$NOLOG_PID [tinyproxy]=$TINY_PID [squid]=$SQUID_WORKER)
TARGETS="direct scopeproxy scope-nolog tinyproxy squid"

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

# one wrk run: prints "rps p50_ms p99_ms cpu_us_per_req"
run_wrk() {
  local target=$1 size=$2 close=$3 port=${PORT_OF[$1]} pid=${PID_OF[$1]} before after out rps requests
  export BENCH_TARGET="http://127.0.0.1:$NGINX_PORT/$size" BENCH_HOST="127.0.0.1:$NGINX_PORT" BENCH_CLOSE=$close
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  if [ "$target" = direct ]; then
    out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/direct.lua" "http://127.0.0.1:$port/$size")
  else
    out=$(taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/proxy.lua" "http://127.0.0.1:$port")
  fi
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  local non2xx; non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  local errors; errors=$(awk '/Socket errors/ {print}' <<<"$out")
  local p50 p99
  p50=$(awk '$1=="50%" {print $2}' <<<"$out"); p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  local cpu="-"
  if [ -n "$pid" ]; then after=$(cpu_ticks "$pid"); cpu=$(awk -v t=$((after - before)) -v r="$requests" -v u=$TICK_US 'BEGIN { printf "%.1f", (r > 0 ? t * u / r : 0) }'); fi
  [ "$non2xx" != 0 ] && echo "warning: $target $size close=$close: $non2xx non-2xx responses" >&2
  [ -n "$errors" ] && [ "$close" = 0 ] && echo "note: $target $size: $errors" >&2
  echo "$rps $(to_ms "$p50") $(to_ms "$p99") $cpu"
}
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n *= 1000; printf "%.2f", n }'; }
median() { sort -g | awk '{a[NR]=$1} END { print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) }'; }

echo "scopeproxy benchmark: $(nproc) cores, wrk -t1 -c$CONNECTIONS -d${DURATION}s, median of $REPEATS interleaved runs"
echo "proxy on core 0; wrk and nginx (1 worker) on core 1; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "scopeproxy: embedded default config, JSON access log to /dev/null; scope-nolog: same with --no-access-log"
declare -A RESULT
for mode in keepalive close; do
  close=0; [ "$mode" = close ] && close=1
  for size in $SIZES; do
    for repeat in $(seq 1 "$REPEATS"); do
      for target in $TARGETS; do
        RESULT["$mode/$size/$target/$repeat"]=$(run_wrk "$target" "$size" "$close")
      done
    done
  done
done

printf '\n%-9s %-5s %-11s %10s %8s %8s %9s %9s\n' mode size target "req/s" "p50 ms" "p99 ms" "cpu-us/req" "vs direct"
for mode in keepalive close; do
  for size in $SIZES; do
    direct_rps=$(for r in $(seq 1 "$REPEATS"); do echo "${RESULT[$mode/$size/direct/$r]}" | cut -d' ' -f1; done | median)
    for target in $TARGETS; do
      col() { for r in $(seq 1 "$REPEATS"); do echo "${RESULT[$mode/$size/$target/$r]}" | cut -d' ' -f"$1"; done | median; }
      rps=$(col 1); p50=$(col 2); p99=$(col 3)
      cpu=$([ "$target" = direct ] && echo "-" || col 4)
      printf '%-9s %-5s %-11s %10.0f %8s %8s %9s %9.2f\n' "$mode" "$size" "$target" "$rps" "$p50" "$p99" "$cpu" "$(awk -v a="$rps" -v b="$direct_rps" 'BEGIN{print a/b}')"
      RESULT["$mode/$size/$target/median"]=$rps
    done
    printf '%-9s %-5s %-11s %10s %8s %8s %9s %9.2f\n' "$mode" "$size" "scope/squid" "" "" "" "" \
      "$(awk -v a="${RESULT[$mode/$size/scopeproxy/median]}" -v b="${RESULT[$mode/$size/squid/median]}" 'BEGIN{print a/b}')"
  done
done

echo
echo "peak RSS after the wrk runs (KiB): scopeproxy $(peak_rss_kib "$SCOPE_PID"), tinyproxy $(peak_rss_kib "$TINY_PID"), squid $(peak_rss_kib "$SQUID_WORKER")"

# --- 1 GiB streamed upload: direct vs through scopeproxy, Content-Length and chunked ---
SINK_PORT=$(free_port)
taskset -c 1 python3 bench/upload_sink.py "$SINK_PORT" & PIDS+=($!)
wait_port "$SINK_PORT"
truncate -s "${UPLOAD_MIB}M" "$WORK/upload.bin"
upload() {  # via framing -> MB/s
  local via=$1 framing=$2 args=() speed
  [ "$via" = scopeproxy ] && args+=(-x "http://127.0.0.1:$SCOPE_PORT")
  [ "$framing" = chunked ] && args+=(-H "Transfer-Encoding: chunked")
  speed=$(taskset -c 1 curl -sS "${args[@]}" -T "$WORK/upload.bin" -o /dev/null -w '%{speed_upload}' "http://127.0.0.1:$SINK_PORT/upload")
  awk -v s="$speed" 'BEGIN { printf "%.0f\n", s / 1048576 }'
}
echo
printf '%-28s %10s %10s %9s\n' "${UPLOAD_MIB} MiB upload" "direct" "scopeproxy" "ratio"
for framing in content-length chunked; do
  d=$(for r in $(seq 1 "$REPEATS"); do upload direct "$framing"; done | median)
  s=$(for r in $(seq 1 "$REPEATS"); do upload scopeproxy "$framing"; done | median)
  printf '%-28s %8s MB/s %8s MB/s %9.2f\n' "$framing" "$d" "$s" "$(awk -v a="$s" -v b="$d" 'BEGIN{print a/b}')"
done
echo "scopeproxy peak RSS after the uploads: $(peak_rss_kib "$SCOPE_PID") KiB"
