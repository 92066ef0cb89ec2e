#!/usr/bin/env bash
# Does splice(2) win here? A Content-Length upload (curl -T to bench/upload_sink.py) direct, through
# a relay that copies through a 256 KiB user-space buffer, and through one that splices through a
# pipe (bench/relay.py), relay on core 0, curl and the sink on core 1, as in bench/run.sh.
# Prints MB/s and the relay's CPU seconds for each, ROUNDS times.
#   SPLICE_MIB=1024 SPLICE_ROUNDS=3 bench/splice_experiment.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${SPLICE_MIB:-1024}
ROUNDS=${SPLICE_ROUNDS:-3}
source bench/lib.sh
start_workspace splice
SINK_PORT=$(free_port)
taskset -c 1 python3 bench/upload_sink.py "$SINK_PORT" & PIDS+=($!)
wait_port "$SINK_PORT"
truncate -s "${MIB}M" "$WORK/upload.bin"
upload() { taskset -c 1 curl -s -H "Expect:" -T "$WORK/upload.bin" -o /dev/null -w '%{speed_upload}' "http://127.0.0.1:$1/upload"; }
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
upload "$SINK_PORT" >/dev/null   # warm-up
printf '%-8s %10s %10s\n' mode "MB/s" "relay CPU s"
for round in $(seq "$ROUNDS"); do
  printf '%-8s %10.0f %10s\n' direct "$(awk -v b="$(upload "$SINK_PORT")" 'BEGIN { print b / 1e6 }')" -
  for mode in copy splice; do
    port=$(free_port)
    taskset -c 0 python3 bench/relay.py "$mode" "$port" "$SINK_PORT" & relay=$!
    wait_port "$port"
    speed=$(upload "$port")
    printf '%-8s %10.0f %10s\n' "$mode" "$(awk -v b="$speed" 'BEGIN { print b / 1e6 }')" "$(cpu_seconds "$relay")"
    kill "$relay"; wait "$relay" 2>/dev/null || true
  done
done
