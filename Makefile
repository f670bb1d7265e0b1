# klarna-reconciler — the commands a newcomer needs. Each target installs what it is missing first.
SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
# Local units go where the administrator's do; the package-manager paths (/usr/lib/...) are for distributions.
UNITDIR ?= /etc/systemd/system
SYSUSERSDIR ?= /etc/sysusers.d
TMPFILESDIR ?= /etc/tmpfiles.d
CATALOGDIR ?= /usr/lib/systemd/catalog
DEBIAN_PACKAGES := pkg-config libcurl4-openssl-dev libsystemd-dev libsqlite3-dev curl systemd python3
BENCH_PACKAGES := wrk postgresql
# The tests put Debian's nginx in front of the socket (Tests/IntegrationTests/NginxTests.swift), parse /metrics with the
# Prometheus client library's own parser (MetricsTests.swift), and run the store conformance suite against a
# PostgreSQL server they start themselves (Tests/TestSupport/PostgresServer.swift; openssl makes its test certificate),
# and check the shipped alerting rules and dashboard against a real /metrics with promtool (Debian's prometheus).
CHECK_PACKAGES := nginx python3-prometheus-client postgresql openssl prometheus

DEB_PACKAGES := dpkg-dev fakeroot lintian

.PHONY: deps build demo test check format bench install deb clean

# The code's layout, as .swift-format says (the toolchain's swift-format): `make format` applies it, the checks refuse
# a file it would change.
SWIFT_FORMAT_PATHS := Sources Tests Benchmarks Package.swift
SWIFT_FORMAT_LINT := swift format lint --strict --configuration .swift-format --recursive $(SWIFT_FORMAT_PATHS)

format:
	swift format format --configuration .swift-format --in-place --recursive $(SWIFT_FORMAT_PATHS)

deps:
	@scripts/install-deps.sh $(DEBIAN_PACKAGES)

build: deps
	@scripts/stamp-commit.sh >/dev/null
	swift build

## The main job: the Klarna sandbox and the daemon in a temporary folder, payments tracked through the CLI.
demo: build
	.build/debug/klarna-sandbox demo

## The edit loop: the build (failing on a warning from this package's code) and the Swift tests: unit, engine, and
## integration over real sockets. No apt-get, no .deb, no systemd: run `make check` once first for the tools the
## integration tests start (nginx, PostgreSQL).
test:
	scripts/check-docs.py
	$(SWIFT_FORMAT_LINT)
	scripts/swift-build-checked.sh --build-tests
	scripts/swift-test.sh --skip-build

## Every test: unit, engine against the sandbox over real sockets, the daemon as a process (kill -9 included, and
## behind Debian's nginx; its hostile-input storm alone, after the rest), the demo (which checks what it shows), the shipped units checked by systemd-analyze, the system tests under a real systemd user
## manager and journald, and the Debian package built, linted, installed, run from its installed units and purged,
## then installed over the previous release (built from its tag) with payments open.
check: deps
	@scripts/install-deps.sh $(CHECK_PACKAGES)
	scripts/check-docs.py
	$(SWIFT_FORMAT_LINT)
	scripts/swift-build-checked.sh --build-tests
	scripts/swift-test.sh --skip-build
	.build/debug/klarna-sandbox demo >.build/demo.log 2>&1 || { tail -n 60 .build/demo.log; exit 1; }
	KLARNA_RECONCILER_STORM=1 scripts/swift-test.sh --skip-build --filter hostileStorm
	scripts/check-units.sh .build/debug/klarna-reconciler
	Tests/System/run.sh .build/debug/klarna-reconciler
	$(MAKE) deb
	Tests/Package/run.sh dist/klarna-reconciler_*_amd64.deb .build/debug/klarna-sandbox

## Every area of BENCHMARKS.md, each figure next to its reference measured in the same run; the figures go there.
bench: deps
	@scripts/install-deps.sh $(BENCH_PACKAGES)
	@scripts/stamp-commit.sh >/dev/null
	swift build -c release
	scripts/bench.sh

## The binary, the units (service, ingest and control sockets, sysusers.d, tmpfiles.d, journal catalog), the docs, and the example
## configuration unless one is already there. Then: systemd-sysusers; systemd-tmpfiles --create; systemctl daemon-reload.
install: deps
	@scripts/stamp-commit.sh >/dev/null
	swift build -c release --product klarna-reconciler
	install -D -m 0755 .build/release/klarna-reconciler $(DESTDIR)$(PREFIX)/bin/klarna-reconciler
	install -D -m 0644 systemd/klarna-reconciler.service $(DESTDIR)$(UNITDIR)/klarna-reconciler.service
	install -D -m 0644 systemd/klarna-reconciler.socket $(DESTDIR)$(UNITDIR)/klarna-reconciler.socket
	install -D -m 0644 systemd/klarna-reconciler-control.socket $(DESTDIR)$(UNITDIR)/klarna-reconciler-control.socket
	install -D -m 0644 systemd/klarna-reconciler.sysusers $(DESTDIR)$(SYSUSERSDIR)/klarna-reconciler.conf
	install -D -m 0644 systemd/klarna-reconciler.tmpfiles $(DESTDIR)$(TMPFILESDIR)/klarna-reconciler.conf
	install -D -m 0644 systemd/klarna-reconciler.catalog $(DESTDIR)$(CATALOGDIR)/klarna-reconciler.catalog
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/README.md
	for doc in docs/*.md; do install -D -m 0644 $$doc $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/$$doc; done
	install -D -m 0644 etc/config.yaml $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/config.yaml.example
	install -D -m 0644 etc/nginx/klarna-reconciler.conf $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler.conf
	install -D -m 0644 etc/nginx/klarna-reconciler-log-format.conf $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/examples/nginx-klarna-reconciler-log-format.conf
	install -D -m 0644 etc/prometheus/klarna-reconciler-rules.yml $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/examples/prometheus-klarna-reconciler-rules.yml
	install -D -m 0644 etc/grafana/klarna-reconciler-dashboard.json $(DESTDIR)$(PREFIX)/share/doc/klarna-reconciler/examples/grafana-klarna-reconciler-dashboard.json
	test -e $(DESTDIR)$(SYSCONFDIR)/klarna-reconciler/config.yaml || \
		install -D -m 0640 etc/config.yaml $(DESTDIR)$(SYSCONFDIR)/klarna-reconciler/config.yaml

## The Debian package, dist/klarna-reconciler_VERSION_amd64.deb: the Swift runtime linked statically, Debian's
## libraries as Depends:, package paths, maintainer scripts; then lintian on it (README, "Install").
deb: deps
	@scripts/install-deps.sh $(DEB_PACKAGES)
	rm -f dist/klarna-reconciler_*_amd64.deb
	scripts/build-deb.sh
	lintian --fail-on error,warning dist/klarna-reconciler_*_amd64.deb

clean:
	rm -rf .build dist
