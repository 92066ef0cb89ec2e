#!/usr/bin/env bash
# Runs each fuzz target from its seed corpus, in one of two ways:
#   fuzz/run.sh          make fuzz: a campaign of FUZZ_SECONDS (default 60) per target, random seeds;
#   fuzz/run.sh --fixed  make test: a fixed number of inputs per target (the table below, or
#                        FUZZ_RUNS for all) from a fixed seed (FUZZ_SEED, default 1), so CI runs the
#                        same inputs every time and a failure there is one a rerun shows again.
# Any crash, sanitizer or leak report, or an input slower than 5 s fails the run; the input lands in
# fuzz/artifacts/ (replay: SCOPEPROXY_FUZZ_TARGET=T .build/fuzz/scopeproxy-fuzz FILE) and becomes a
# corpus entry and a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fixed=false
[ "${1:-}" != --fixed ] || fixed=true
seconds=${FUZZ_SECONDS:-60}
seed=${FUZZ_SEED:-1}
fuzz/build.sh
mkdir -p fuzz/artifacts
failed=""
started=$(date +%s)
# target:corpus:inputs for --fixed: every target from its whole corpus, then new inputs from the fixed
# seed, chosen so the sixteen take about 50 s of one core (make test runs them beside the suite and
# must stay under 10 minutes on 2 cores, build included); the long search is make fuzz's campaign.
# docs/testing.md, "What takes the time", gives the figures.
for entry in RequestHead:request:30000 Chunked:chunked:50000 ResponseHead:response:30000 Config:config:5000 \
             Redactor:redactor:10000 ExchangeMachine:machine:7500 ClientCredentials:credentials:30000 \
             SecretScan:secretscan:1000 TokenResponse:tokenresponse:15000 WholePath:wholepath:15000 \
             Noninterference:noninterference:750 H2Request:h2request:20000 WebSocketFrames:websocket:20000 \
             H2Connection:h2connection:3000 ClientHello:clienthello:20000 CredentialAnswers:credentialanswers:60000; do
  IFS=: read -r target corpus inputs <<<"$entry"
  work=$(mktemp -d)
  cp fuzz/corpus/"$corpus"/* "$work"/
  # The config loader also starts from every config the tests and examples use (kept in one place).
  [ "$target" != Config ] || cp Tests/ScopeConfigTests/Fixtures/*.yaml config/*.yaml "$work"/
  if $fixed; then
    budget=(-seed="$seed" -runs="${FUZZ_RUNS:-$inputs}")
    # Swift seeds its hashing per process: fixed here, so Set and Dictionary orders (and with them
    # what the fuzzer is told is new coverage) are the same in every run.
    export SWIFT_DETERMINISTIC_HASHING=1
  else
    budget=(-max_total_time="$seconds")
  fi
  log=$(mktemp)
  status=0
  began=$(date +%s)
  SCOPEPROXY_FUZZ_TARGET=$target SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=1 \
    .build/fuzz/scopeproxy-fuzz "${budget[@]}" -timeout=5 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix=fuzz/artifacts/"$target"- -print_final_stats=1 "$work" >"$log" 2>&1 || status=$?
  runs=$(grep -Eo "number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$" || echo "?")
  took=$(( $(date +%s) - began ))
  if [ "$status" = 0 ]; then
    if $fixed; then echo "fuzz $target: $runs inputs (seed $seed) in ${took}s, no finding"; else echo "fuzz $target: ${seconds}s, $runs inputs, no finding"; fi
  else
    echo "fuzz $target: FAILED (status $status); the report:"
    grep -E "Fatal error|ERROR|SUMMARY|leak|Test unit written|Base64" "$log" | head -20
    failed="$failed $target"
  fi
  rm -rf "$work" "$log"
done
echo "fuzz pass: $(( $(date +%s) - started ))s"
[ -z "$failed" ] || { echo "fuzz findings in:$failed"; exit 1; }
