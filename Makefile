# The two set-up commands: `make run` and `make test`. Each installs the Debian packages it needs
# when they are missing, so a fresh Debian/Ubuntu machine with the Swift toolchain is enough.

SWIFT ?= swift
ARGS ?=
BUILD_PACKAGES := libevent-dev libssl-dev libyaml-dev pkgconf
TEST_PACKAGES := curl openssl python3 python3-requests python3-h11 python3-httpx
BENCH_PACKAGES := nginx-light wrk tinyproxy squid curl mitmproxy

# Installs the named Debian packages that are not installed yet (sudo only when not root).
define ensure_packages
	@missing=""; for package in $(1); do \
	  dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

.PHONY: run test hostile build release bench soak leak-check sanitize demo fuzz image-check chroot-check packages-build packages-test packages-node packages-bench clean

packages-build:
	$(call ensure_packages,$(BUILD_PACKAGES))

packages-test: packages-build
	$(call ensure_packages,$(TEST_PACKAGES))
	@# python-requests is a real client in the tests; pip only when another python3 shadows Debian's
	@python3 -c 'import requests' 2>/dev/null || python3 -m pip install -q requests
	@# h11 is the second parser of the codec's differential test (test harness only)
	@python3 -c 'import h11' 2>/dev/null || python3 -m pip install -q h11
	@# httpx is a real client in the recipe tests (HTTP_PROXY / SSL_CERT_FILE)
	@python3 -c 'import httpx' 2>/dev/null || python3 -m pip install -q httpx
	@# Node's WHATWG URL parser is the reference of the Location differential test
	@command -v node >/dev/null || $(MAKE) --no-print-directory packages-node

packages-node:
	$(call ensure_packages,nodejs)

packages-bench: packages-build
	$(call ensure_packages,$(BENCH_PACKAGES))

build: packages-build
	$(SWIFT) build

release: packages-build
	$(SWIFT) build -c release

## Build (release) and start the proxy on the embedded default: 127.0.0.1:8080. `make run ARGS="--listen 127.0.0.1:0"`
run: release
	.build/release/scopeproxy run $(ARGS)

## Build and run the whole suite: codec tables, in-process engine tests, black-box binary tests,
## then the short fuzz pass (FUZZ_SECONDS each of the six fuzz targets; CI runs this).
test: packages-test
	$(SWIFT) build
	$(SWIFT) test --no-parallel
	FUZZ_SECONDS=$${FUZZ_SECONDS:-20} fuzz/run.sh

## Side-by-side benchmark, one table: direct nginx vs scopeproxy (full, engine) vs tinyproxy vs squid
## (wrk rows, uploads, a CONNECT tunnel), then TLS interception next to mitmdump; printed and written
## on top of bench/RESULTS.md (BENCH_WRITE_RESULTS=0 skips that). Not part of `make test`.
bench: release packages-bench
	BENCH_COMMAND="make bench" bench/run.sh

## Only the hostile-peer suites: clients, upstreams, limits (10 000 idle connections), smuggling vectors.
hostile: packages-test
	$(SWIFT) build
	$(SWIFT) test --no-parallel --filter 'HostileClientTests|HostileUpstreamTests|LimitsTests|FailureEngineTests|DifferentialTests'

## 5 minutes of mixed and hostile load through the release binary, RSS sampled every 10 s, with a
## verdict on the memory trend (SOAK_SECONDS, SOAK_SAMPLE). Not part of `make test`.
soak: release packages-bench
	bench/soak.sh

## Every test under AddressSanitizer (the spawned proxy binary too, with LeakSanitizer at its exit),
## then the engine tests under ThreadSanitizer (separate build trees in .build/asan and .build/tsan).
sanitize: packages-test
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build/asan
	SCOPEPROXY_SANITIZED=1 SCOPEPROXY_BINARY=$(CURDIR)/.build/asan/debug/scopeproxy SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 \
	  SCOPEPROXY_CHILD_ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
	  $(SWIFT) test --sanitize=address --scratch-path .build/asan --skip-build --no-parallel
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build/tsan
	SCOPEPROXY_SANITIZED=1 SCOPEPROXY_BINARY=$(CURDIR)/.build/tsan/debug/scopeproxy SWIFT_BACKTRACE=enable=no TSAN_OPTIONS=halt_on_error=1 \
	  $(SWIFT) test --sanitize=thread --scratch-path .build/tsan --skip-build --no-parallel --filter ProxyEngineTests

## The proxy built with AddressSanitizer under a minute of the soak's mixed load; LeakSanitizer
## reports any leak at exit (the run fails on a report).
leak-check: packages-bench
	$(SWIFT) build --sanitize=address --scratch-path .build/asan --product scopeproxy
	SOAK_SECONDS=$${SOAK_SECONDS:-60} SOAK_SAMPLE=5 SCOPEPROXY_BINARY=.build/asan/debug/scopeproxy \
	  SCOPEPROXY_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 SWIFT_BACKTRACE=enable=no bench/soak.sh

## Starts two demo origins and the proxy, and shows injection, stripping and a redirect in the log.
demo: release
	config/demo/run.sh

## libFuzzer targets: request head, chunked decoder, response head, config loader, redactor,
## exchange state machine
## (FUZZ_SECONDS each, default 60).
fuzz: packages-build
	fuzz/run.sh

## Checks the Dockerfile's runtime packages against `ldd` of the binary built as the Dockerfile builds it.
image-check: packages-build
	.ci/image-check

## Runs the binary inside a minimal Debian 12 root holding only the image's runtime packages (needs root).
chroot-check: packages-build
	.ci/chroot-check

clean:
	rm -rf .build
