#!/usr/bin/env bash
# make fuzz / make test: runs each fuzz target for FUZZ_SECONDS (default 60) from its seed corpus.
# Any crash, sanitizer or leak report, or an input slower than 5 s fails the run; the input lands in
# fuzz/artifacts/ (replay: SCOPEPROXY_FUZZ_TARGET=T .build/fuzz/scopeproxy-fuzz FILE) and becomes a
# regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
fuzz/build.sh
mkdir -p fuzz/artifacts
failed=""
for pair in RequestHead:request Chunked:chunked ResponseHead:response Config:config Redactor:redactor ExchangeMachine:machine ClientCredentials:credentials SecretScan:secretscan TokenResponse:tokenresponse; do
  target=${pair%%:*}; corpus=${pair##*:}
  work=$(mktemp -d)
  cp fuzz/corpus/"$corpus"/* "$work"/
  # The config loader also starts from every config the tests and examples use (kept in one place).
  [ "$target" != Config ] || cp Tests/ScopeConfigTests/Fixtures/*.yaml config/*.yaml "$work"/
  log=$(mktemp)
  status=0
  SCOPEPROXY_FUZZ_TARGET=$target SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=1 \
    .build/fuzz/scopeproxy-fuzz -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix=fuzz/artifacts/"$target"- -print_final_stats=1 "$work" >"$log" 2>&1 || status=$?
  runs=$(grep -Eo "number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" || echo "?")
  if [ "$status" = 0 ]; then
    echo "fuzz $target: ${seconds}s, $runs inputs, no finding"
  else
    echo "fuzz $target: FAILED (status $status); the report:"
    grep -E "Fatal error|ERROR|SUMMARY|leak|Test unit written|Base64" "$log" | head -20
    failed="$failed $target"
  fi
  rm -rf "$work" "$log"
done
[ -z "$failed" ] || { echo "fuzz findings in:$failed"; exit 1; }
