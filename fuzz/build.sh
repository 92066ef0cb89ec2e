#!/usr/bin/env bash
# Builds the libFuzzer targets: each is the codec's sources plus one entry point, compiled with
# -sanitize=fuzzer,address in one module (so internal API is reachable, as in the unit tests).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build/fuzz
# The unit tests' split-point drivers, shared rather than copied (one module here: no import needed).
sed '/^@testable import/d' Tests/HTTP1CodecTests/SplitPointVerifier.swift > .build/fuzz/SplitPointVerifier.swift
for target in RequestHead Chunked ResponseHead; do
  swiftc -O -parse-as-library -sanitize=fuzzer,address -module-name HTTP1Codec \
    Sources/HTTP1Codec/*.swift .build/fuzz/SplitPointVerifier.swift "fuzz/${target}Fuzzer.swift" \
    -o ".build/fuzz/${target}" 2>&1 | grep -v "Cannot export local symbol" || true
  [ -x ".build/fuzz/${target}" ] || { echo "building the $target fuzzer failed"; exit 1; }
done
