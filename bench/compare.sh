#!/usr/bin/env bash
# Two scopeproxy binaries side by side in one run (before/after a change): wrk through each, same
# config (one scope injecting a token for the nginx origin, JSON access log to /dev/null),
# interleaved and repeated (median), then a streamed upload through each.
#
#   bench/compare.sh OLD_BINARY NEW_BINARY
#   COMPARE_DURATION=5 COMPARE_REPEATS=3 COMPARE_UPLOAD_MIB=256 bench/compare.sh old new
#
# Pinning as in run.sh: the proxies on core 0, wrk and nginx on core 1. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/compare.sh OLD_BINARY NEW_BINARY}
NEW=${2:?usage: bench/compare.sh OLD_BINARY NEW_BINARY}
DURATION=${COMPARE_DURATION:-5}
REPEATS=${COMPARE_REPEATS:-3}
UPLOAD_MIB=${COMPARE_UPLOAD_MIB:-256}
source bench/lib.sh
start_workspace compare
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
median() { sort -g | awk '{a[NR]=$1} END { print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) }'; }

NGINX_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT"
taskset -c 1 nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"
SINK_PORT=$(free_port)
taskset -c 1 python3 bench/upload_sink.py "$SINK_PORT" & PIDS+=($!)
wait_port "$SINK_PORT"

cat > "$WORK/compare.yaml" <<YAML
secrets: { bench_token: { env: BENCH_TOKEN } }
scopes:
  - name: bench
    origins: ["http://127.0.0.1:$NGINX_PORT"]
    require_https: false
    inject: { Authorization: "Bearer \${bench_token}" }
log: { output: /dev/null }
YAML
declare -A PORT PID
for name in old new; do
  binary=$OLD; [ "$name" = new ] && binary=$NEW
  PORT[$name]=$(free_port)
  BENCH_TOKEN=compare-token taskset -c 0 "$binary" run --config "$WORK/compare.yaml" --listen "127.0.0.1:${PORT[$name]}" --threads 1 \
    >/dev/null 2>"$WORK/$name.err" & PID[$name]=$!; PIDS+=(${PID[$name]})
  wait_port "${PORT[$name]}"
done

cat > "$WORK/proxy.lua" <<'LUA'
wrk.path = os.getenv("BENCH_TARGET")
wrk.headers["Host"] = os.getenv("BENCH_HOST")
if os.getenv("BENCH_CLOSE") == "1" then wrk.headers["Connection"] = "close" end
LUA
# one wrk run: "req/s cpu-us/req"
run_wrk() {
  local name=$1 size=$2 close=$3 before after out requests
  export BENCH_TARGET="http://127.0.0.1:$NGINX_PORT/$size" BENCH_HOST="127.0.0.1:$NGINX_PORT" BENCH_CLOSE=$close
  before=$(cpu_ticks "${PID[$name]}")
  out=$(taskset -c 1 wrk -t1 -c32 -d"${DURATION}s" -s "$WORK/proxy.lua" "http://127.0.0.1:${PORT[$name]}")
  after=$(cpu_ticks "${PID[$name]}")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  grep -q "Non-2xx" <<<"$out" && echo "warning: $name $size: non-2xx responses" >&2
  awk -v r="$requests" -v d="$DURATION" -v t=$((after - before)) -v u=$TICK_US 'BEGIN { printf "%.0f %.1f\n", r / d, (r > 0 ? t * u / r : 0) }'
}
upload() {  # name framing -> MB/s
  # no `Expect: 100-continue` (curl adds it above 1 MiB; the sink never answers 100: a 1 s wait per upload)
  local args=(-x "http://127.0.0.1:${PORT[$1]}" -H "Expect:")
  [ "$2" = chunked ] && args+=(-H "Transfer-Encoding: chunked")
  taskset -c 1 curl -sS "${args[@]}" -T "$WORK/upload.bin" -o /dev/null -w '%{speed_upload}' "http://127.0.0.1:$SINK_PORT/upload" \
    | awk '{ printf "%.0f\n", $1 / 1048576 }'
}

echo "scopeproxy before/after: $(nproc) cores, wrk -t1 -c32 -d${DURATION}s, median of $REPEATS interleaved runs, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "old: $OLD"
echo "new: $NEW"
printf '\n%-22s %12s %12s %8s %14s %14s\n' work "old req/s" "new req/s" "new/old" "old cpu-us/req" "new cpu-us/req"
for work in "keepalive 1k" "keepalive 64k" "keepalive 1m" "close 1k"; do
  mode=${work% *}; size=${work#* }; close=0; [ "$mode" = close ] && close=1
  declare -A R=()
  for repeat in $(seq 1 "$REPEATS"); do
    for name in old new; do R[$name/$repeat]=$(run_wrk "$name" "$size" "$close"); done
  done
  col() { for r in $(seq 1 "$REPEATS"); do echo "${R[$1/$r]}" | cut -d' ' -f"$2"; done | median; }
  printf '%-22s %12.0f %12.0f %8.2f %14s %14s\n' "$work" "$(col old 1)" "$(col new 1)" \
    "$(awk -v a="$(col new 1)" -v b="$(col old 1)" 'BEGIN{print a/b}')" "$(col old 2)" "$(col new 2)"
done

truncate -s "${UPLOAD_MIB}M" "$WORK/upload.bin"
printf '\n%-22s %12s %12s %8s\n' "${UPLOAD_MIB} MiB upload" "old MB/s" "new MB/s" "new/old"
for framing in content-length chunked; do
  o=$(for r in $(seq 1 "$REPEATS"); do upload old "$framing"; done | median)
  n=$(for r in $(seq 1 "$REPEATS"); do upload new "$framing"; done | median)
  printf '%-22s %12s %12s %8.2f\n' "$framing" "$o" "$n" "$(awk -v a="$n" -v b="$o" 'BEGIN{print a/b}')"
done
echo
echo "peak RSS (KiB): old $(awk '/VmHWM/ {print $2}' "/proc/${PID[old]}/status"), new $(awk '/VmHWM/ {print $2}' "/proc/${PID[new]}/status")"
