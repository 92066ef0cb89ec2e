#!/usr/bin/env bash
# Builds .build/fuzz/scopeproxy-fuzz: the sources of the pure modules (codec, scope policy, exchange
# core, config, secret scanning, redaction; PosixSupport and JSONText under them), the engine's three
# HTTP/2 session files (nghttp2 and libevent buffers, no sockets: the H2Connection target), plus the entry points
# and the test references they compare with, compiled as
# one module with -sanitize=fuzzer,address (so internal API is reachable, as in the unit tests).
# Copies under .build/fuzz/src drop the cross-module imports. Rebuilt only when a source is newer
# than the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.build/fuzz
binary="$out/scopeproxy-fuzz"
inputs=(Sources/PosixSupport/*.swift Sources/ProxySettings/*.swift Sources/JSONText/*.swift Sources/Digests/*.swift Sources/AWSSigV4/*.swift Sources/HTTP1Codec/*.swift Sources/ScopePolicy/*.swift
        Sources/ProxyCore/*.swift Sources/ScopeConfig/*.swift Sources/SecretScan/*.swift Sources/Redaction/*.swift
        Tests/HTTP1CodecTests/SplitPointVerifier.swift Tests/SecretScanTests/NaiveSecretScan.swift
        Tests/ProxyCoreTests/NamesOnlyTokenSource.swift fuzz/*.swift
        Sources/ProxyEngine/H2Session.swift Sources/ProxyEngine/H2SessionCallbacks.swift Sources/ProxyEngine/H2Fields.swift
        Sources/CScanPrefilter/scan_prefilter.c Sources/CScanPrefilter/include/scan_prefilter.h)
if [ -x "$binary" ] && [ -z "$(find "${inputs[@]}" -newer "$binary" 2>/dev/null | head -1)" ]; then
  exit 0
fi
rm -rf "$out/src" && mkdir -p "$out/src"
for file in "${inputs[@]}"; do
  [[ $file == *.swift ]] || continue
  module=$(basename "$(dirname "$file")")
  sed -E '/^(@testable |@_exported )?import (PosixSupport|ProxySettings|JSONText|Digests|AWSSigV4|HTTP1Codec|ScopePolicy|ProxyCore|ScopeConfig|SecretScan|Redaction)$/d' "$file" > "$out/src/$module-$(basename "$file")"
done
echo "building the fuzz targets (sanitized, optimized; about a minute)"
# The binary is dated when this build started, not when it ended: a source edited while it
# compiles is newer than the binary, so the next run builds again instead of fuzzing stale code.
touch "$out/build-started"
# The scanner's C prefilter, instrumented like the Swift around it (AddressSanitizer, and coverage for the fuzzer).
clang -O2 -fsanitize=address,fuzzer-no-link -I Sources/CScanPrefilter/include -c Sources/CScanPrefilter/scan_prefilter.c -o "$out/scan_prefilter.o"
swiftc -O -wmo -parse-as-library -sanitize=fuzzer,address -module-name ScopeproxyFuzz -I Sources/CYAML -I Sources/COpenSSL \
  -I Sources/CLibevent -I Sources/CNGHTTP2 -I Sources/CScanPrefilter/include -levent -lnghttp2 \
  "$out"/src/*.swift "$out/scan_prefilter.o" -o "$binary.new" 2>&1 | grep -E "error" || true
[ -x "$binary.new" ] || { echo "building the fuzz targets failed"; exit 1; }
mv "$binary.new" "$binary"
touch -r "$out/build-started" "$binary"
