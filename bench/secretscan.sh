#!/usr/bin/env bash
# The secret scanner's throughput (a figure, not a test): builds bench/SecretScanBench.swift with the
# SecretScan and HTTP1Codec sources as one optimized module (as fuzz/build.sh does) and runs it.
#   bench/secretscan.sh [MiB]   (default 256)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.build/secretscan-bench
rm -rf "$out" && mkdir -p "$out/src"
for file in Sources/HTTP1Codec/*.swift Sources/SecretScan/*.swift bench/SecretScanBench.swift; do
  sed -E '/^(@testable )?import (HTTP1Codec|SecretScan)$/d' "$file" > "$out/src/$(basename "$(dirname "$file")")-$(basename "$file")"
done
cc -O2 -I Sources/CScanPrefilter/include -c Sources/CScanPrefilter/scan_prefilter.c -o "$out/scan_prefilter.o"
swiftc -O -wmo -parse-as-library -module-name SecretScanBench -I Sources/CScanPrefilter/include "$out"/src/*.swift "$out/scan_prefilter.o" \
  -o "$out/secretscan-bench"
"$out/secretscan-bench" "${1:-256}"
