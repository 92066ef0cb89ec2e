# HTTP/2 rows of bench/run.sh (sourced by it, after the CONNECT tunnel rows; uses its WORK, PIDS,
# PORT_OF, PID_OF, NGINX_PORT, NGINX_H2_PORT, REPEATS, TICK_US, log, median and cpu_ticks).
#
# h2load (nghttp2-client) on core 1 fetches /1k a fixed number of times over H2_CONNECTIONS
# connections with H2_STREAMS concurrent streams each:
#   - direct: h2c with prior knowledge to nginx's second listener (`listen ... http2;` without ssl,
#     which in nginx 1.22 is h2c prior knowledge only), same nginx, same files as the HTTP/1.1 rows;
#   - scopeproxy full / scrub + guard off / engine: h2c with prior knowledge on the proxy's plain
#     listener, `:authority` naming the HTTP/1.1 origin (the upstream leg is HTTP/1.1);
#   - scopeproxy full, h2 both sides: the same process as "full", `:authority` naming nginx's h2c
#     listener (the scope covers it too), so the upstream leg is h2c and the streams share one
#     connection to the origin: the same origin and protocol as the direct row;
#   - mitmdump 8.1 takes no h2c with prior knowledge (it picks HTTP/2 only from ALPN: in regular
#     mode it answers the preface `400 ... no host header`, in reverse mode it closes the connection
#     unanswered), so it is measured as a reverse proxy taking h2 inside TLS from h2load
#     (ALPN h2, its own certificate; h2load does not verify it) to the same plain HTTP/1.1 origin.
#     That leg does TLS on top of what the scopeproxy rows do: on a few long-lived connections its
#     record cost is small next to mitmdump's per-request cost, but the ratio slightly favours
#     scopeproxy. It runs fewer requests (about 1 000 req/s where scopeproxy does thousands to tens of thousands).
H2_REQUESTS=${BENCH_H2_REQUESTS:-30000}
H2_MITM_REQUESTS=${BENCH_H2_MITM_REQUESTS:-2000}
H2_CONNECTIONS=${BENCH_H2_CONNECTIONS:-4}
H2_STREAMS=${BENCH_H2_STREAMS:-100}
H2_PROXIES="full unguarded engine mitmdump"
H2_TARGETS="direct full-h2 $H2_PROXIES"
PORT_OF[full-h2]=${PORT_OF[full]}; PID_OF[full-h2]=${PID_OF[full]}

# mitmdump: reverse proxy to the plain origin, one process on core 0 like every proxy here.
MITM_H2_PORT=$(free_port)
taskset -c 0 mitmdump -q --set flow_detail=0 --set "confdir=$WORK/mitmproxy" --listen-host 127.0.0.1 -p "$MITM_H2_PORT" \
  --mode "reverse:http://127.0.0.1:$NGINX_PORT" >"$WORK/mitmdump-h2.log" 2>&1 & MITM_H2_PID=$!; PIDS+=($MITM_H2_PID)
# mitmdump takes seconds to start (longer while other work holds core 0): up to 90 s.
for _ in $(seq 1 900); do (exec 3<>/dev/tcp/127.0.0.1/"$MITM_H2_PORT") 2>/dev/null && break; sleep 0.1; done
wait_port "$MITM_H2_PORT"
PORT_OF[mitmdump]=$MITM_H2_PORT; PID_OF[mitmdump]=$MITM_H2_PID

# h2load's arguments for TARGET: its URL, and for the scopeproxy rows the origin as `:authority`.
h2_url() {
  case $1 in
    direct) echo "http://127.0.0.1:$NGINX_H2_PORT/1k" ;;
    mitmdump) echo "https://127.0.0.1:$MITM_H2_PORT/1k" ;;
    *) echo "http://127.0.0.1:${PORT_OF[$1]}/1k" ;;
  esac
}
# one h2load run: prints "req/s cpu-us/req" (cpu "-" for direct), or "fail -"
run_h2() {
  local target=$1 requests=$2 pid=${PID_OF[$1]} before after out rps succeeded failed cpu=- args
  args=(-t1 -c"$H2_CONNECTIONS" -m"$H2_STREAMS" -n"$requests")
  case $target in
    direct|mitmdump) ;;
    full-h2) args+=(-H ":authority: 127.0.0.1:$NGINX_H2_PORT") ;;
    *) args+=(-H ":authority: 127.0.0.1:$NGINX_PORT") ;;
  esac
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  out=$(taskset -c 1 timeout --foreground 300 h2load "${args[@]}" "$(h2_url "$target")" 2>&1) || true
  [ -n "$pid" ] && after=$(cpu_ticks "$pid")
  rps=$(awk '/^finished in/ {print $4}' <<<"$out")
  succeeded=$(awk '/^requests:/ {print $8}' <<<"$out"); failed=$(awk '/^requests:/ {print $10}' <<<"$out")
  if [ "${succeeded:-0}" != "$requests" ] || [ "$(awk '/^status codes:/ {print $3}' <<<"$out")" != "$requests" ]; then
    log "warning: h2 $target: ${succeeded:-0} of $requests succeeded (${failed:-?} failed): $(grep -E '^(requests|status codes):' <<<"$out" | tr '\n' ' ')"
    echo "fail -"; return
  fi
  [ -n "$pid" ] && cpu=$(awk -v t=$((after - before)) -v r="$requests" -v u=$TICK_US 'BEGIN { printf "%.1f", t * u / r }')
  echo "$rps $cpu"
}

# Every target must serve a handful of h2 requests before anything is measured.
for target in $H2_TARGETS; do
  [ "$(run_h2 "$target" 8)" = "fail -" ] && { echo "h2load could not fetch /1k over HTTP/2 through $target" >&2; exit 1; }
done

log "HTTP/2: h2load -t1 -c$H2_CONNECTIONS -m$H2_STREAMS, $H2_REQUESTS requests ($H2_MITM_REQUESTS for mitmdump), median of $REPEATS interleaved runs"
for repeat in $(seq 1 "$REPEATS"); do
  for target in $H2_TARGETS; do
    log "  h2load 1k $target (run $repeat of $REPEATS)"
    n=$H2_REQUESTS; [ "$target" = mitmdump ] && n=$H2_MITM_REQUESTS
    RESULT["h2/$target/$repeat"]=$(run_h2 "$target" "$n")
  done
done
declare -A HWM_H2
for proxy in $H2_PROXIES; do HWM_H2[$proxy]=$(status_kib "${PID_OF[$proxy]}" VmHWM); done

# The section of the report: the table, then the two ratios the issue sets targets for.
h2_report() {
  local target line full direct mitm
  echo "### HTTP/2 from the client: h2load"
  echo
  echo "\`h2load -t1 -c$H2_CONNECTIONS -m$H2_STREAMS -n$H2_REQUESTS\` (mitmdump: \`-n$H2_MITM_REQUESTS\`) on core 1, 1 KiB responses from the same"
  echo "nginx; every cell the median of $REPEATS interleaved runs: req/s ÷ direct (the direct cell gives req/s), the proxy's CPU µs"
  echo "per request in parentheses. direct: h2c with prior knowledge to nginx (\`listen ... http2;\`). scopeproxy: h2c with prior"
  echo "knowledge on its plain listener (\`-H ':authority: 127.0.0.1:ORIGIN'\`); \"h2 both sides\" names nginx's h2c listener, so the"
  echo "streams go on over h2c (one shared connection to the origin, the direct row's origin and protocol); the other scopeproxy"
  echo "columns name the HTTP/1.1 listener (HTTP/1.1 to the origin, a connection per stream in flight). mitmdump refuses h2c with"
  echo "prior knowledge, so it runs \`--mode reverse:http://ORIGIN\` and h2load speaks h2 over TLS to it (ALPN h2): TLS on $H2_CONNECTIONS"
  echo "long-lived connections, work the scopeproxy rows do not do, small next to mitmdump's per-request cost."
  echo
  echo "| work | direct (nginx h2c) | scopeproxy full, h2 both sides | scopeproxy full, HTTP/1.1 to the origin | full, scrub + guard off | scopeproxy engine | mitmdump (h2 over TLS, reverse) |"
  echo "|---|---|---|---|---|---|---|"
  line="| 1 KiB, $H2_CONNECTIONS connections × $H2_STREAMS streams, × direct (proxy CPU µs/req) |"
  for target in $H2_TARGETS; do line+=" $(cell h2 "$target" req/s) |"; done
  echo "$line"
  echo
  full=$(col h2 full 1); direct=$(col h2 direct 1); mitm=$(col h2 mitmdump 1); both=$(col h2 full-h2 1)
  awk -v f="$full" -v b="$both" -v d="$direct" -v m="$mitm" -v s="$H2_STREAMS" -v fc="$(col h2 full 2)" -v mc="$(col h2 mitmdump 2)" 'BEGIN {
    if (f == "fail" || b == "fail" || d == "fail" || m == "fail") { print "Targets: not computed (a row failed)."; exit }
    printf "Targets (1 KiB, %s streams): scopeproxy full ÷ direct h2c %.2f with h2 both sides, %.2f with HTTP/1.1 to the origin (target ≥ 0.5); scopeproxy full ÷ mitmdump %.1f in req/s, %.1f in CPU per request (target ≥ 20).\n",
      s, b / d, f / d, f / m, mc / fc }'
  echo
  local -A names=([full]="scopeproxy full" [unguarded]="full, scrub + guard off" [engine]="scopeproxy engine" [mitmdump]=mitmdump)
  line=""
  for proxy in $H2_PROXIES; do line+="${line:+; }${names[$proxy]} $(mib "${HWM_H2[$proxy]}")"; done
  echo "Peak RSS after the HTTP/2 rows, MiB (VmHWM): $line."
}
