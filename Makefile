# make run       — create .venv, install, migrate, start the app on http://localhost:$(PORT) and a lab worker
# make test      — install the app and test tools (Debian packages too, as root; the npm
#                  credential verifiers and axe-core), lint, run every test
# make test-fast — lint and the fast lane (-m "not slow": no browser, server, ranks or sandbox); run it first
# make docs      — serve the documentation site (docs/, mkdocs.yml) on http://127.0.0.1:8000
# make bench     — measure the platform and its labs (docs/benchmarks.md)
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PORT    ?= 8501
STAMP   := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: run test test-fast lint docs bench migrate system-deps sandbox-deps verifiers axe clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(DEVSTAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(STAMP) $@

migrate: $(STAMP)
	$(BIN)/python -c "from academy.db import get_engine; get_engine()"

# The app and one lab worker together; the worker stops when the app does.
# On several machines, run each on its own (docs/operators/several-machines.md).
run: migrate sandbox-deps
	@$(BIN)/python -m academy.worker & worker=$$!; \
	trap 'kill $$worker 2>/dev/null; wait $$worker 2>/dev/null' EXIT INT TERM; \
	$(BIN)/streamlit run app/main.py --server.port $(PORT) --server.headless true \
		--browser.gatherUsageStats false

# bubblewrap runs learners' exercise code in a sandbox (labs/sandbox/run.py; setpriv
# comes with util-linux). Installed as root; otherwise say how, and go on: the
# exercises are then refused with a clear message, everything else works.
sandbox-deps:
	@if command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing: bubblewrap"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	else \
		echo "note: no bubblewrap; coding exercises will be refused (sudo apt-get install bubblewrap)"; \
	fi

# Debian packages the tests use: Chromium for the browser tests, poppler for
# rendering certificate PDFs, zbar to decode their QR codes, PostgreSQL for
# the postgres-marked tests, Redis for the lab queue's multi-machine tests,
# npm for axe-core where the machine has no Node.js, and bubblewrap for the
# sandbox (sandbox-deps).
system-deps: sandbox-deps
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=""; \
		command -v chromium >/dev/null || missing="$$missing chromium"; \
		command -v pdftoppm >/dev/null || missing="$$missing poppler-utils"; \
		command -v zbarimg >/dev/null || missing="$$missing zbar-tools"; \
		ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
		command -v redis-server >/dev/null || missing="$$missing redis-server"; \
		command -v npm >/dev/null || missing="$$missing npm"; \
		if [ -n "$$missing" ]; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		fi; \
	else \
		command -v chromium >/dev/null || echo "note: no chromium; browser tests will be skipped (apt-get install chromium)"; \
	fi

# Third-party credential verifiers the tests run (tests/verifiers: Digital Bazaar's
# vc with the eddsa-rdfc-2022 and eddsa-jcs-2022 suites, jose), from the npm
# lock file; without Node.js those tests are skipped. Installed again only when the
# lock file is newer than the install (npm writes node_modules/.package-lock.json):
# npm ci takes about 9 s here, on every run of the fast lane otherwise.
verifiers:
	@if ! command -v npm >/dev/null; then \
		echo "note: no npm; the third-party credential verifier tests will be skipped"; \
	elif [ ! tests/verifiers/node_modules/.package-lock.json -nt tests/verifiers/package-lock.json ]; then \
		npm ci --prefix tests/verifiers --no-audit --no-fund --loglevel=error >/dev/null; \
	fi

# axe-core, the accessibility engine the browser tests run on every page (tests/browserkit.py;
# one package, no dependencies), from its npm lock file (tests/axe). The browser tests need it:
# as root without Node.js, system-deps installs Debian's npm.
axe:
	@if command -v npm >/dev/null; then \
		npm ci --prefix tests/axe --no-audit --no-fund --loglevel=error >/dev/null; \
	else \
		echo "note: no npm; the browser tests' axe-core checks will fail (apt-get install npm)"; \
	fi

lint: $(DEVSTAMP)
	$(BIN)/ruff check .

# pytest runs on three xdist workers (pyproject.toml); its wall time is printed either way,
# after pytest's 30 slowest tests (--durations=30 in pyproject.toml). Bytecode is written even
# where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite's hundreds of processes
# (servers, workers, lab runs) then compile our modules once, not each on its own.
PYTEST = start=$$(date +%s); status=0; env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest $(1) $(ARGS) || status=$$?; \
	took=$$(( $$(date +%s) - start )); \
	echo "make $@: pytest took $$((took / 60)) min $$((took % 60)) s (exit $$status)"; \
	exit $$status

test: $(DEVSTAMP) system-deps verifiers axe lint
	$(BIN)/python -m quizzes check
	@$(call PYTEST,)

# The fast lane: what starts no browser, server, lab ranks, worker or sandbox
# (docs/contributors/tests.md). Installs no Debian package.
test-fast: $(DEVSTAMP) verifiers lint
	$(BIN)/python -m quizzes check
	@$(call PYTEST,-m "not slow and not gpu")

docs: $(DEVSTAMP)
	$(BIN)/mkdocs serve $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts tests/verifiers/node_modules tests/axe/node_modules
