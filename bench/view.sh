#!/usr/bin/env bash
# The live view under load (docs/view.md, "A slow viewer"): does watching the proxy slow it down?
# scopeproxy `--threads 1` on core 0 with an admin address, the bench's "full" setup (one scope
# injecting a token, JSON access log to a file, scrub and guard on), a one-worker nginx on core 1,
# wrk -t1 -c32 on core 1 fetching 1 KiB over keep-alive (bench/run.sh's first row). Three phases,
# interleaved over the repeats:
#   none     admin configured, nobody watching;
#   100      100 viewers of /view/events, all reading (bench/view_viewers.py, one process, core 1);
#   100/10   the same 100, of which 10 never read: they must be dropped once 1 MiB behind, the other
#            90 still receiving every record.
# Reported: wrk's req/s (median) and its ratio to "none" (target >= 0.90), records per viewer against
# records published (the feed's sequence numbers: first and last id each viewer saw, and the records
# missed in between), viewers the proxy closed, the proxy's peak RSS per phase (VmHWM, reset before
# each phase through /proc/PID/clear_refs), the view's metrics, and the machine's load.
#   BENCH_DURATION=5 BENCH_REPEATS=3 bench/view.sh      (make bench-view)
#   BENCH_DURATION=1 BENCH_REPEATS=1 BENCH_WRITE_RESULTS=0 bench/view.sh    (the plumbing only)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${BENCH_DURATION:-5}
REPEATS=${BENCH_REPEATS:-3}
CONNECTIONS=${BENCH_CONNECTIONS:-32}
VIEWERS=${BENCH_VIEWERS:-100}
STALLED=${BENCH_STALLED:-10}
WRITE_RESULTS=${BENCH_WRITE_RESULTS:-1}
RESULTS_FILE=${BENCH_RESULTS_FILE:-bench/RESULTS.md}
BINARY=${SCOPEPROXY_BINARY:-.build/release/scopeproxy}
COMMAND=$(for v in BENCH_DURATION BENCH_REPEATS BENCH_CONNECTIONS BENCH_VIEWERS BENCH_STALLED SCOPEPROXY_BINARY; do
  [ -n "${!v:-}" ] && printf '%s=%s ' "$v" "${!v}"; done; echo "${BENCH_COMMAND:-bench/view.sh}")
source bench/lib.sh
start_workspace bench-view
log() { echo "$*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END { print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) }'; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
[ -x "$BINARY" ] || { echo "no scopeproxy binary at $BINARY (swift build -c release)" >&2; exit 1; }
LOAD_START=$(cut -d" " -f1-3 /proc/loadavg)
log "load average at the start: $LOAD_START (a shared machine moves the figures: see the report)"

NGINX_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT"
taskset -c 1 nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"

ADMIN_PORT=$(free_port)
PROXY_PORT=$(free_port)
cat > "$WORK/view.yaml" <<YAML
admin: "127.0.0.1:$ADMIN_PORT"
secrets: { bench_token: { env: BENCH_TOKEN } }
scopes:
  - name: bench
    origins: ["http://127.0.0.1:$NGINX_PORT"]
    inject: { Authorization: "Bearer \${bench_token}" }
log: { output: $WORK/access.log }
YAML
"$BINARY" check --config "$WORK/view.yaml" >"$WORK/check.txt" 2>&1 \
  || { cat "$WORK/check.txt" >&2; echo "scopeproxy check refused $WORK/view.yaml" >&2; exit 1; }
BENCH_TOKEN=bench-token-0123456789 taskset -c 0 "$BINARY" run --config "$WORK/view.yaml" --listen "127.0.0.1:$PROXY_PORT" --threads 1 \
  >/dev/null 2>"$WORK/proxy.err" & PROXY_PID=$!; PIDS+=($PROXY_PID)
wait_port "$PROXY_PORT"; wait_port "$ADMIN_PORT"
code=$(curl -sS --max-time 10 -x "http://127.0.0.1:$PROXY_PORT" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NGINX_PORT/1k" || true)
[ "$code" = 200 ] || { echo "the proxy answered '$code' for the origin's /1k" >&2; exit 1; }
# The stream must answer before anything is measured (a proxy without the view answers 404).
code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/view/events" 2>/dev/null || true)
[ "$code" = 200 ] || { echo "GET /view/events on the admin address answered '$code' (is the view's feed in this binary?)" >&2; exit 1; }

cat > "$WORK/proxy.lua" <<'LUA'
wrk.path = os.getenv("BENCH_TARGET")
wrk.headers["Host"] = os.getenv("BENCH_HOST")
LUA
export BENCH_TARGET="http://127.0.0.1:$NGINX_PORT/1k" BENCH_HOST="127.0.0.1:$NGINX_PORT"

metrics() { curl -sS --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | grep '^scopeproxy_view_' || true; }
# The feed's count of records published (its metric; the access log's line count when it has none).
published() {
  local value
  value=$(metrics | awk '$1 ~ /^scopeproxy_view_records_published_total/ {print $2}' | head -1)
  [ -n "$value" ] && echo "$value" || wc -l < "$WORK/access.log"
}

# one phase: prints "req/s hwm-kib published viewers-json" (viewers-json "-" without viewers), where
# published is the feed's count when the viewers stop (the requests wrk left in flight included).
phase() {
  local viewers=$1 stalled=$2 out rps hwm summary=- fifo="$WORK/viewers.in" viewer_pid count
  echo 5 > "/proc/$PROXY_PID/clear_refs"   # VmHWM := VmRSS: this phase's peak only
  if [ "$viewers" != 0 ]; then
    rm -f "$fifo"; mkfifo "$fifo"
    taskset -c 1 python3 bench/view_viewers.py --port "$ADMIN_PORT" --count "$viewers" --stalled "$stalled" \
      <"$fifo" >"$WORK/viewers.out" 2>"$WORK/viewers.err" & viewer_pid=$!; PIDS+=($viewer_pid)
    exec 7>"$fifo"
    for _ in $(seq 1 300); do grep -q '^ready$\|error' "$WORK/viewers.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready$' "$WORK/viewers.out" || { cat "$WORK/viewers.out" "$WORK/viewers.err" >&2; echo "the viewers did not connect" >&2; exit 1; }
  fi
  out=$(taskset -c 1 timeout --foreground $((DURATION + 30)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/proxy.lua" "http://127.0.0.1:$PROXY_PORT")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  local non2xx; non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); [ -n "$non2xx" ] && log "warning: $non2xx non-2xx responses"
  sleep 1   # the requests wrk left in flight end, and their records reach the readers
  count=$(published)
  if [ "$viewers" != 0 ]; then
    exec 7>&-  # the viewers' stdin closes: they report and exit
    wait "$viewer_pid" || true
    summary=$(tail -1 "$WORK/viewers.out")
  fi
  hwm=$(status_kib "$PROXY_PID" VmHWM)
  echo "${rps:-0} $hwm $count $summary"
}

declare -A RPS HWM LAST
PHASES="none 100 100/10"
for repeat in $(seq 1 "$REPEATS"); do
  for name in $PHASES; do
    case $name in
      none) result=$(phase 0 0) ;;
      100) result=$(phase "$VIEWERS" 0) ;;
      100/10) result=$(phase "$VIEWERS" "$STALLED") ;;
    esac
    read -r rps hwm count summary <<<"$result"
    RPS[$name]+="$rps "; HWM[$name]+="$hwm "; LAST[$name]="$summary|$count"
    log "repeat $repeat, $name: $rps req/s, VmHWM $(mib "$hwm") MiB, published $count, viewers ${summary}"
  done
done
LOAD_END=$(cut -d" " -f1-3 /proc/loadavg)
VIEW_METRICS=$(metrics | tr '\n' ';' | sed 's/;$//; s/;/; /g')

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
max_kib() { tr ' ' '\n' <<<"$1" | grep . | sort -g | tail -1; }
BASE=$(med "${RPS[none]}")
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); g=d.get(sys.argv[2], {}); print(g.get(sys.argv[3]))' "$1" "$2" "$3" 2>/dev/null || echo -; }
row() {
  local name=$1 rps summary published reading stalled
  rps=$(med "${RPS[$name]}")
  summary=${LAST[$name]%|*}; published=${LAST[$name]##*|}
  if [ "$summary" = - ]; then reading="-"; stalled="-"
  else
    reading="$(field "$summary" reading viewers) viewers: records $(field "$summary" reading records_min)-$(field "$summary" reading records_max), ids $(field "$summary" reading first_id_min)..$(field "$summary" reading last_id_max) (lowest last id $(field "$summary" reading last_id_min)), missed at most $(field "$summary" reading missed_max), closed by the proxy $(field "$summary" reading closed_by_server)"
    stalled="$(field "$summary" stalled viewers) never reading: closed by the proxy $(field "$summary" stalled closed_by_server)"
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$rps" "$(awk -v a="$rps" -v b="$BASE" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" \
    "$(mib "$(max_kib "${HWM[$name]}")")" "$published" "$reading" "$stalled"
}
REPORT=$(cat <<EOF
## The live view: $VIEWERS viewers at the 1 KiB keep-alive rate ($(date -u '+%Y-%m-%d %H:%M') UTC)

Command: \`$COMMAND\`. Machine: $(nproc) cores, $(uname -sr); load average (1, 5, 15 min) $LOAD_START at the start, $LOAD_END at the end.
Binary: $BINARY (tree at commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)).
scopeproxy \`--threads 1\` on core 0 with \`admin:\` set (one scope injecting a token, JSON access log to a file, scrub and guard on);
nginx (1 worker), wrk -t1 -c$CONNECTIONS -d${DURATION}s (1 KiB, keep-alive) and the viewers (bench/view_viewers.py, one process) on core 1.
req/s: the median of $REPEATS interleaved runs; the rest from the last run of each phase. Peak RSS: VmHWM of the phase (reset before it), the highest over the runs.
Records: the feed's sequence numbers (SSE ids) the viewers saw, against the records published (the feed's metric, or the access log's lines).

| phase | req/s | × none | proxy peak RSS MiB | records published (total, when the viewers stopped) | reading viewers | stalled viewers |
|---|---|---|---|---|---|---|
$(for name in $PHASES; do row "$name"; done)

The view's metrics at the end: ${VIEW_METRICS:-none}.
EOF
)
echo "$REPORT"
if [ "$WRITE_RESULTS" = 1 ]; then
  # A section of its own, newest first, under the runs bench/run.sh keeps: the earlier content stays.
  python3 - "$RESULTS_FILE" "$REPORT" <<'PY'
import sys
path, report = sys.argv[1], sys.argv[2]
text = open(path).read()
marker = "<!-- view runs: bench/view.sh adds its report below this line, newest first -->"
if marker not in text:
    text = text.rstrip("\n") + "\n\n# The live view under load (bench/view.sh)\n\n" + marker + "\n"
head, _, rest = text.partition(marker)
text = head + marker + "\n\n" + report.replace("## ", "### ", 1) + "\n" + rest
open(path, "w").write(text)
PY
  log "report added to $RESULTS_FILE"
fi
