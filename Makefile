# Depot: two commands for a newcomer.
#   make run    installs what is missing, builds, and starts depotd on ./depot-data (ipc endpoint)
#   make test   installs what is missing, builds, and runs every test (Swift and Python, on SQLite
#               and again on a throwaway PostgreSQL)

SWIFT ?= swift
# The Python that creates the project's virtual environment; everything Python runs in .venv.
PYTHON ?= python3
VENV ?= .venv
VENV_PYTHON := $(VENV)/bin/python
DATA_DIR ?= ./depot-data
SWIFT_TEST_FLAGS ?=
# e.g. BENCH_FLAGS="--quick" or BENCH_FLAGS="--filter ping --filter save"
BENCH_FLAGS ?=

.PHONY: setup setup-system setup-python setup-browser build run test test-swift test-postgres test-python test-consumer test-browser studio soak bench fuzz format clean

setup: setup-system setup-python

# System libraries: libzmq (ZeroMQ) and SQLite headers, from Debian/Ubuntu packages; and Debian's
# PostgreSQL server, which the DepotPostgres tests start themselves (scripts/postgres.sh: a throwaway
# cluster in a temporary directory on a free loopback port, so a system cluster the package may have
# started on 5432 does not get in the way).
setup-system:
	@if ! pkg-config --exists libzmq || [ ! -f /usr/include/sqlite3.h ] \
		|| ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing libzmq3-dev, libsqlite3-dev and postgresql"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libzmq3-dev libsqlite3-dev pkg-config postgresql; \
	fi

# A project virtual environment (.venv, ignored by git): Debian 12 and Ubuntu 24.04 refuse
# pip in the system Python (PEP 668). `python3 -m venv` needs Debian's python3-venv.
$(VENV_PYTHON):
	@if ! command -v $(PYTHON) >/dev/null 2>&1 || ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
		echo "installing python3 and python3-venv"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq python3 python3-venv; \
	fi
	@rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	@$(VENV_PYTHON) -m pip install -q --disable-pip-version-check --upgrade pip

# The Python client (installed from clients/python/pyproject.toml) and what its tests need, in .venv.
setup-python: $(VENV_PYTHON)
	@$(VENV_PYTHON) -m pip install -q --disable-pip-version-check -r clients/python/requirements-dev.txt
	@$(VENV_PYTHON) -m pip install -q --disable-pip-version-check ./clients/python

# Depot Studio's browser tests: Debian's chromium and chromium-driver, selenium from PyPI.
setup-browser: $(VENV_PYTHON)
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing chromium and chromium-driver"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi
	@$(VENV_PYTHON) -m pip install -q --disable-pip-version-check -r Tests/Browser/requirements.txt

build: setup-system
	$(SWIFT) build

run: setup-system build
	@echo "depotd on $(DATA_DIR) — try, in another terminal: .build/debug/depot ping"
	.build/debug/depotd --data-dir $(DATA_DIR) --model Examples/worldcup-model.json

test: setup
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build $(SWIFT_TEST_FLAGS)
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(VENV_PYTHON) -m pytest -q clients/python/tests
	@$(MAKE) --no-print-directory test-postgres
	@$(MAKE) --no-print-directory test-consumer
	@$(MAKE) --no-print-directory test-browser

test-swift: setup-system
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build $(SWIFT_TEST_FLAGS)

# The end-to-end suites (Swift and Python) again with every daemon's store on PostgreSQL, and the
# cluster tests (several daemons on one server, clients/python/tests/test_cluster.py), against a
# throwaway server that scripts/with-postgres.sh starts and stops, even on failure.
test-postgres: setup
	$(SWIFT) build --build-tests
	scripts/with-postgres.sh sh -c '$(SWIFT) test --skip-build --filter EndToEndTests \
		&& DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(VENV_PYTHON) -m pytest -q clients/python/tests'

test-python: setup build
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(VENV_PYTHON) -m pytest -q clients/python/tests

# A user's package (Tests/Consumer) that depends on Depot by path: it compiles every Swift block of
# README.md and docs/swift-client.md verbatim, and its Misuse target must be refused by the compiler.
test-consumer: setup-system
	$(PYTHON) Tests/Consumer/extract_snippets.py
	$(SWIFT) build --package-path Tests/Consumer --target Consumer
	@mkdir -p Tests/Consumer/.build
	@if $(SWIFT) build --package-path Tests/Consumer --target Misuse > Tests/Consumer/.build/misuse.log 2>&1; then \
		echo "Tests/Consumer: Misuse compiled, but a delegate that is not main-actor isolated must be refused"; exit 1; \
	elif grep -q "main actor-isolated property 'delegate'" Tests/Consumer/.build/misuse.log; then \
		echo "Tests/Consumer: Misuse refused as it should be (main actor-isolated delegate)"; \
	else cat Tests/Consumer/.build/misuse.log; echo "Tests/Consumer: Misuse failed for another reason"; exit 1; fi

# A soak run against a real daemon (scripts/soak.py): mixed load from many processes, every delta and
# answer checked; fails on any anomaly, lost notification or RSS growth. CI runs it for 60 seconds.
SOAK_SECONDS ?= 600
soak: setup
	$(SWIFT) build --product depotd
	$(VENV_PYTHON) scripts/soak.py --depotd .build/debug/depotd --duration $(SOAK_SECONDS)

# Depot Studio in a real headless Chromium against a real depotd (screenshots: the folder it prints).
test-browser: setup-system setup-browser
	$(SWIFT) build --product depotd
	$(SWIFT) build --product depot
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(VENV_PYTHON) -m pytest -q Tests/Browser

# Depot Studio against `make run`'s daemon: http://127.0.0.1:8080/
studio: build
	.build/debug/depot studio --data-dir $(DATA_DIR)

bench: setup-system
	$(SWIFT) build -c release --product depotd
	$(SWIFT) build -c release --product DepotBenchmarks
	.build/release/DepotBenchmarks --depotd .build/release/depotd --output Benchmarks/results $(BENCH_FLAGS)

# libFuzzer targets (Fuzz/): JSON parser, predicates (SQL vs evaluator), dispatch. FUZZ_SECONDS each.
FUZZ_SECONDS ?= 60
FUZZ_SEED ?= 0
fuzz: setup-system
	SWIFT=$(SWIFT) FUZZ_SEED=$(FUZZ_SEED) bash Fuzz/run.sh $(FUZZ_SECONDS)

format:
	$(SWIFT) format -i -r Sources Tests Benchmarks

clean:
	rm -rf .build Tests/Consumer/.build
