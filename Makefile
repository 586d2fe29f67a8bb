# Depot: two commands for a newcomer.
#   make run    installs what is missing, builds, and starts depotd on ./depot-data (ipc endpoint)
#   make test   installs what is missing, builds, and runs every test (Swift and Python)

SWIFT ?= swift
PYTHON ?= python3
DATA_DIR ?= ./depot-data
SWIFT_TEST_FLAGS ?=
# e.g. BENCH_FLAGS="--quick" or BENCH_FLAGS="--filter ping --filter save"
BENCH_FLAGS ?=

.PHONY: setup setup-system setup-python setup-browser build run test test-swift test-python test-browser studio bench format clean

setup: setup-system setup-python

# System libraries: libzmq (ZeroMQ) and SQLite headers, from Debian/Ubuntu packages.
setup-system:
	@if ! pkg-config --exists libzmq || [ ! -f /usr/include/sqlite3.h ]; then \
		echo "installing libzmq3-dev and libsqlite3-dev"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libzmq3-dev libsqlite3-dev pkg-config; \
	fi

# The Python client and what its tests need.
setup-python:
	@$(PYTHON) -m pip install -q --disable-pip-version-check -r clients/python/requirements-dev.txt
	@$(PYTHON) -m pip install -q --disable-pip-version-check -e clients/python

# Depot Studio's browser tests: Debian's chromium and chromium-driver, selenium from PyPI.
setup-browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing chromium and chromium-driver"; \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi
	@$(PYTHON) -m pip install -q --disable-pip-version-check -r Tests/Browser/requirements.txt

build: setup-system
	$(SWIFT) build

run: setup-system build
	@echo "depotd on $(DATA_DIR) — try, in another terminal: .build/debug/depot ping"
	.build/debug/depotd --data-dir $(DATA_DIR) --model examples/worldcup-model.json

test: setup
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build $(SWIFT_TEST_FLAGS)
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(PYTHON) -m pytest -q clients/python/tests
	$(MAKE) test-browser

test-swift: setup-system
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build $(SWIFT_TEST_FLAGS)

test-python: setup build
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(PYTHON) -m pytest -q clients/python/tests

# Depot Studio in a real headless Chromium against a real depotd (screenshots: the folder it prints).
test-browser: setup-system setup-browser
	$(SWIFT) build --product depotd
	$(SWIFT) build --product depot
	DEPOTD=$(CURDIR)/.build/debug/depotd DEPOT=$(CURDIR)/.build/debug/depot $(PYTHON) -m pytest -q Tests/Browser

# Depot Studio against `make run`'s daemon: http://127.0.0.1:8080/
studio: build
	.build/debug/depot studio --data-dir $(DATA_DIR)

bench: setup-system
	$(SWIFT) build -c release --product depotd
	$(SWIFT) build -c release --product DepotBenchmarks
	.build/release/DepotBenchmarks --depotd .build/release/depotd --output Benchmarks/results $(BENCH_FLAGS)

format:
	$(SWIFT) format -i -r Sources Tests Benchmarks

clean:
	rm -rf .build
