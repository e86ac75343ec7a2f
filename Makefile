# snakka: the two commands a new user needs are `make run` and `make test`.
# Both work on a fresh machine: they create .venv, install snakka and its dependencies, and
# install kcat (Debian) for the client-compatibility tests, KafkaJS (npm, when npm is there) and
# a Java 17 runtime for PySpark.

VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run serve test lint bench-produce gen-protocol system-deps kcat java kafkajs clean

$(VENV)/.installed: pyproject.toml setup.py $(wildcard src/snakka/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,spark]'
	touch $@

setup: $(VENV)/.installed

# kcat for the client-compatibility tests; a Java 17 runtime for PySpark (issue 5); Chromium
# and its WebDriver for the web console's browser tests (tests/console).
system-deps:
	@command -v kcat >/dev/null 2>&1 && command -v java >/dev/null 2>&1 && \
	  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq kcat chromium chromium-driver \
	    $$(command -v java >/dev/null 2>&1 || echo openjdk-17-jre-headless); }

# KafkaJS (npm, pinned by tests/clients/kafkajs/package-lock.json) for tests/clients/test_kafkajs.py;
# Node.js and npm from Debian when the machine has none. Without them (no root, no Debian
# mirror), or when npm ci fails (no registry), the KafkaJS tests skip with the reason
# tests/clients/kafkajs_support.py gives; `make test` goes on either way.
KAFKAJS_DIR := tests/clients/kafkajs

kafkajs: $(KAFKAJS_DIR)/node_modules/.installed

$(KAFKAJS_DIR)/node_modules/.installed: $(KAFKAJS_DIR)/package.json $(KAFKAJS_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; } || \
	  echo "make: nodejs/npm could not be installed from Debian" >&2
	@if command -v npm >/dev/null 2>&1; then \
	  (cd $(KAFKAJS_DIR) && npm ci --no-audit --no-fund --loglevel=error) && touch $@ || \
	  echo "make: npm ci in $(KAFKAJS_DIR) failed; the KafkaJS tests will skip" >&2; \
	else echo "make: npm not found; the KafkaJS tests will skip" >&2; fi

# A Java 17 runtime for PySpark, from Debian when the machine has none.
java:
	@command -v java >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq openjdk-17-jre-headless; }

# The main demo: the reference Spark pipeline on an embedded snakka broker and Spark local[*]
# (clickstream generator -> Structured Streaming windowed aggregates -> topic + Parquet ->
# batch cross-check). Output in ./pipeline-output.
run: setup java
	$(VENV)/bin/snakka pipeline demo

# kcat (Debian), which the README's first steps use next to `make serve`.
kcat:
	@command -v kcat >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq kcat; }

# Start a broker on localhost:9092 (IPv4 and IPv6), data in ./snakka-data. Ctrl-C stops it.
# Installs kcat first when it can (the README uses it next); the broker starts without it.
serve: setup
	@$(MAKE) --no-print-directory kcat || \
	  echo "make serve: kcat could not be installed (needs apt-get and root or sudo); the broker runs without it" >&2
	$(VENV)/bin/snakka serve

# ruff everywhere; mypy over src/snakka (strict on the sans-I/O cores: see [tool.mypy] in
# pyproject.toml).
lint: setup
	$(PY) -m ruff check src tests tools bench
	$(PY) -m mypy

# The suite mostly waits (brokers, clients, JVMs), so it runs on more workers than cores;
# tests/conftest.py keeps the Spark tests and the reference-Kafka tests on one worker each.
TEST_WORKERS ?= 4

test: setup system-deps kafkajs lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The cores and unit tests only, in under a minute: tests/conftest.py marks them `fast` (no
# broker, no child process, no real client, no Spark) and fails a fast test that starts one.
# No lint, no system packages. One process by default: the tests are CPU-bound, and xdist
# workers each collect and import the codecs again (~15 CPU-s), which on 2 shared cores costs
# more than it saves (48 s in one process, 53 s on 2 workers); FAST_WORKERS=auto on a bigger
# or idle machine.
.PHONY: test-fast
FAST_WORKERS ?= 0

test-fast: setup
	$(PY) -m pytest -m fast -n $(FAST_WORKERS) --dist loadgroup -q

gen-protocol: setup
	$(PY) tools/gen_protocol.py

bench-produce: setup
	$(PY) bench/bench_produce_consume.py

clean:
	rm -rf $(VENV) snakka-data pipeline-output .pytest_cache .hypothesis .mypy_cache
