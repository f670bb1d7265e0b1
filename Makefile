# klarna-reconciler — the commands a newcomer needs. Each target installs what it is missing first.
SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DEBIAN_PACKAGES := pkg-config libcurl4-openssl-dev libsystemd-dev libsqlite3-dev curl
BENCH_PACKAGES := wrk

.PHONY: deps build demo check bench install clean

deps:
	@scripts/install-deps.sh $(DEBIAN_PACKAGES)

build: deps
	swift build

## The main job: the Klarna sandbox and the daemon in a temporary folder, payments tracked through the CLI.
demo: build
	.build/debug/klarna-reconciler demo

## Every test: unit, engine against the sandbox over real sockets, the daemon as a process (kill -9 included).
check: deps
	swift build --build-tests
	swift test --skip-build

## Client against wrk, then the engine end to end; results go in BENCHMARKS.md.
bench: deps
	@scripts/install-deps.sh $(BENCH_PACKAGES)
	swift build -c release
	scripts/bench.sh

## The binary, and the example configuration unless one is already there.
install: deps
	swift build -c release --product klarna-reconciler
	install -D -m 0755 .build/release/klarna-reconciler $(DESTDIR)$(PREFIX)/bin/klarna-reconciler
	install -D -m 0644 etc/config.yaml $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/config.yaml.example
	test -e $(DESTDIR)$(SYSCONFDIR)/klarna-reconciler/config.yaml || \
		install -D -m 0640 etc/config.yaml $(DESTDIR)$(SYSCONFDIR)/klarna-reconciler/config.yaml

clean:
	rm -rf .build
