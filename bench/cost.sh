#!/usr/bin/env bash
# The proxy's own cost per 1 KiB keep-alive request, in counts that do not depend on how busy the
# machine is: user-space instructions (valgrind callgrind) and heap allocations (valgrind dhat),
# each the difference between a run of N and of 2N requests (start-up cancels out). Two
# configurations, as in bench/run.sh: "full" (one scope injecting Authorization, JSON access log)
# and "engine" (no scopes, --no-access-log); and, as the floor, nginx as a plain relay of the same
# requests (bench/lib.sh write_nginx_relay, one process: `master_process off`), instructions only.
# Instructions are user space only: the kernel's share of a request (the syscalls, about as many
# for each) is in bench/run.sh's CPU figures.
#
#   bench/cost.sh [BINARY] [N]          prints the table
#   COST_BUDGET=bench/cost-budget bench/cost.sh   also fails when allocations or instructions exceed the budget
#   COST_PROFILES=DIR bench/cost.sh     keeps the callgrind profiles; then, per function:
#     bench/per_request.py DIR/full.1.cg DIR/full.2.cg N    (instructions per function)
#     bench/alloc_sites.py DIR/full.1.dhat DIR/full.2.dhat N   (allocations per call site)
set -euo pipefail
cd "$(dirname "$0")/.."
BINARY=${1:-.build/release/scopeproxy}
N=${2:-400}
source bench/lib.sh
start_workspace cost
# valgrind 3.19 cannot read every DWARF 5 form clang 21 writes (the C shim's unit): it measures a
# copy without debug info (the symbol table stays, so the profiles still name functions).
objcopy --strip-debug "$BINARY" "$WORK/scopeproxy" && BINARY="$WORK/scopeproxy"
NGINX_PORT=$(free_port)
write_nginx_origin "$WORK" "$NGINX_PORT"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" & PIDS+=($!)
wait_port "$NGINX_PORT"
cat > "$WORK/full.yaml" <<YAML
secrets: { bench_token: { env: BENCH_TOKEN } }
scopes:
  - name: bench
    origins: ["http://127.0.0.1:$NGINX_PORT"]
    inject: { Authorization: "Bearer \${bench_token}" }
log: { output: $WORK/access.log }
YAML
: > "$WORK/engine.yaml"
# viewed: full with an admin listener and one viewer of the live view attached (records are made
# only while someone watches: docs/view.md), what a watched request costs. Its config is written
# per run, with an admin port chosen just before (a port chosen minutes earlier may by then be the
# local end of some connection, and the proxy could not listen there).

# measure TOOL CONFIG REQUESTS EXTRA_ARGS... -> the tool's total (instructions, or "blocks bytes")
measure() {
  local tool=$1 config=$2 requests=$3 port out; shift 3
  port=$(free_port); out="$WORK/$tool.$config.$requests"
  local config_file="$WORK/$config.yaml" admin=
  if [ "$config" = viewed ]; then
    admin=$(free_port); while [ "$admin" = "$port" ]; do admin=$(free_port); done
    config_file="$out.yaml"
    { echo "admin: \"127.0.0.1:$admin\""; cat "$WORK/full.yaml"; } > "$config_file"
  fi
  local options=(--tool=callgrind --callgrind-out-file="$out")
  [ "$tool" = dhat ] && options=(--tool=dhat --dhat-out-file="$out")
  BENCH_TOKEN=cost-token valgrind "${options[@]}" "$BINARY" run --config "$config_file" \
    --listen "127.0.0.1:$port" --threads 1 "$@" >/dev/null 2>"$out.err" & local pid=$!
  # (a command substitution does not inherit `set -e`: each failure here ends the run itself)
  wait_port "$port" || { echo "the proxy never listened: $(tail -3 "$out.err")" >&2; exit 1; }
  local viewer=
  if [ "$config" = viewed ]; then
    wait_port "$admin" || { echo "the proxy's admin listener never opened: $(tail -3 "$out.err")" >&2; kill "$pid" 2>/dev/null; exit 1; }
    curl -sN -D "$out.head" "http://127.0.0.1:$admin/view/events" > "$out.events" 2>/dev/null & viewer=$!
    # Attached once the stream's head has come (the proxy sends it when the connection has become
    # a viewer); asked of the viewer's own connection, not of the measured process (a /metrics poll
    # would be work the two runs need not share).
    for _ in $(seq 1 300); do grep -q '^HTTP/1.1 200' "$out.head" 2>/dev/null && break; sleep 0.1; done
    grep -q '^HTTP/1.1 200' "$out.head" 2>/dev/null \
      || { echo "the viewer of /view/events was not attached: $(head -1 "$out.head" 2>/dev/null) $(tail -3 "$out.err")" >&2; kill "$pid" 2>/dev/null; exit 1; }
  fi
  python3 bench/keepalive_client.py "$port" "$NGINX_PORT" "$requests" \
    || { echo "the client's requests through the proxy failed: $(tail -3 "$out.err")" >&2; kill "$pid" 2>/dev/null; exit 1; }
  kill -TERM "$pid"; wait "$pid" || true
  if [ -n "$viewer" ]; then
    kill "$viewer" 2>/dev/null || true; wait "$viewer" 2>/dev/null || true
    # every request's record reached the viewer, or the figure would not be what a watched request costs
    local seen; seen=$(grep -c '^data:' "$out.events" || true)
    [ "$seen" -ge "$requests" ] || { echo "the viewer received $seen records for $requests requests" >&2; exit 1; }
  fi
  if [ "$tool" = dhat ]; then
    awk '/Total:/ { gsub(",", ""); print $6, $3 }' "$out.err"   # blocks bytes
  else
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
  fi
}

# the relay: nginx under callgrind, one process, the same client; its port chosen just before each run
measure_relay() {  # REQUESTS -> instructions
  local out="$WORK/callgrind.relay.$1" relay_port; relay_port=$(free_port)
  write_nginx_relay "$WORK" "$relay_port" "$NGINX_PORT" cost-token
  valgrind --tool=callgrind --callgrind-out-file="$out" nginx -g 'master_process off;' -c "$WORK/relay/nginx.conf" \
    -p "$WORK/relay" >/dev/null 2>"$out.err" & local pid=$!
  wait_port "$relay_port" || { echo "the nginx relay never listened: $(tail -3 "$out.err")" >&2; exit 1; }
  python3 bench/keepalive_client.py "$relay_port" "$NGINX_PORT" "$1" \
    || { echo "the client's requests through the nginx relay failed" >&2; kill "$pid" 2>/dev/null; exit 1; }
  kill -TERM "$pid"; wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$out"
}

declare -A RESULT
a=$(measure_relay "$N"); b=$(measure_relay $((N * 2)))
RESULT[relay/instructions]=$(( (b - a) / N ))
CONFIGS=${COST_CONFIGS:-full engine viewed}
for config in $CONFIGS; do
  extra=(); [ "$config" = engine ] && extra=(--no-access-log)
  a=$(measure callgrind "$config" "$N" "${extra[@]}"); b=$(measure callgrind "$config" $((N * 2)) "${extra[@]}")
  RESULT[$config/instructions]=$(( (b - a) / N ))
  if [ -n "${COST_PROFILES:-}" ]; then
    mkdir -p "$COST_PROFILES"
    cp "$WORK/callgrind.$config.$N" "$COST_PROFILES/$config.1.cg"; cp "$WORK/callgrind.$config.$((N * 2))" "$COST_PROFILES/$config.2.cg"
  fi
  read -r a_blocks a_bytes < <(measure dhat "$config" "$N" "${extra[@]}")
  read -r b_blocks b_bytes < <(measure dhat "$config" $((N * 2)) "${extra[@]}")
  [ -n "${COST_PROFILES:-}" ] && cp "$WORK/dhat.$config.$N" "$COST_PROFILES/$config.1.dhat" && cp "$WORK/dhat.$config.$((N * 2))" "$COST_PROFILES/$config.2.dhat"
  RESULT[$config/allocations]=$(( (b_blocks - a_blocks) / N ))
  RESULT[$config/bytes]=$(( (b_bytes - a_bytes) / N ))
done

echo "per 1 KiB keep-alive request ($N vs $((N * 2)) requests, $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
printf '%-8s %14s %12s %16s\n' config instructions allocations "bytes allocated"
for config in $CONFIGS; do
  printf '%-8s %14s %12s %16s\n' "$config" "${RESULT[$config/instructions]}" "${RESULT[$config/allocations]}" "${RESULT[$config/bytes]}"
done
printf '%-8s %14s %12s %16s\n' "relay" "${RESULT[relay/instructions]}" "-" "-"
ratio() {  # A B: the ratio of two configurations' instructions, when both were measured
  [ -n "${RESULT[$1/instructions]:-}" ] && [ -n "${RESULT[$2/instructions]:-}" ] || return 0
  printf '%-8s %14s\n' "$1/$2" "$(awk -v a="${RESULT[$1/instructions]}" -v b="${RESULT[$2/instructions]}" 'BEGIN { printf "%.2f", a / b }')"
}
ratio full engine; ratio full relay; ratio engine relay; ratio viewed full

if [ -n "${COST_BUDGET:-}" ]; then
  status=0
  while read -r config limit instructions; do
    case "$config" in ''|'#'*) continue ;; esac
    [ -n "${RESULT[$config/allocations]:-}" ] || continue   # not measured in this run (COST_CONFIGS)
    actual=${RESULT[$config/allocations]}
    if [ "$actual" -gt "$limit" ]; then
      echo "over budget: $config makes $actual allocations per request, the budget is $limit ($COST_BUDGET)"; status=1
    fi
    actual=${RESULT[$config/instructions]}
    if [ -n "$instructions" ] && [ "$actual" -gt "$instructions" ]; then
      echo "over budget: $config takes $actual instructions per request, the budget is $instructions ($COST_BUDGET)"; status=1
    fi
  done < "$COST_BUDGET"
  [ $status = 0 ] && echo "within the budget of allocations and instructions ($COST_BUDGET)"
  exit $status
fi
