# klarna-reconciler — the commands a newcomer needs. Each target installs what it is missing first.
SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

PREFIX ?= /usr/local
DEBIAN_PACKAGES := pkg-config libcurl4-openssl-dev libsystemd-dev libsqlite3-dev curl
BENCH_PACKAGES := wrk

.PHONY: deps build demo check bench install clean

deps:
	@scripts/install-deps.sh $(DEBIAN_PACKAGES)

build: deps
	swift build

## The main job: the Klarna sandbox and a scripted payment flow through the real client.
demo: build
	.build/debug/klarna-reconciler demo

## Every test: unit tests and integration tests over real sockets against the sandbox.
check: deps
	swift build --build-tests
	swift test --skip-build

## Client throughput and latency against the sandbox, next to wrk against the same sandbox.
bench: deps
	@scripts/install-deps.sh $(BENCH_PACKAGES)
	swift build -c release
	scripts/bench.sh

install: deps
	swift build -c release
	install -D -m 0755 .build/release/klarna-reconciler $(DESTDIR)$(PREFIX)/bin/klarna-reconciler

clean:
	rm -rf .build
