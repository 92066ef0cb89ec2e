#!/usr/bin/env bash
# make fuzz: runs each fuzz target for FUZZ_SECONDS (default 60) from its seed corpus; any crash,
# sanitizer report or timeout fails. Findings land in fuzz/artifacts/ and become regression tests.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
fuzz/build.sh
mkdir -p fuzz/artifacts
for pair in RequestHead:request Chunked:chunked ResponseHead:response; do
  target=${pair%%:*}; corpus=${pair##*:}
  work=$(mktemp -d)
  cp fuzz/corpus/"$corpus"/* "$work"/
  echo "fuzzing $target for ${seconds}s"
  ".build/fuzz/$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix=fuzz/artifacts/"$target"- -print_final_stats=1 "$work" 2>&1 | grep -E "stat::number_of_executed_runs|ERROR|SUMMARY|crash|Done" || true
  status=${PIPESTATUS[0]}
  rm -rf "$work"
  [ "$status" = 0 ] || { echo "$target: fuzzer failed (status $status)"; exit 1; }
done
