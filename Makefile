# The two commands of the README's quick start. Each creates .venv when missing.
# Debian's /usr/bin/python3 (3.11+) when there is one: tasks and notebook servers run as their
# users' uids, which must be able to execute the venv's interpreter; a Python installed under
# root's private home (pyenv in /root) is closed to them. Any python3 >= 3.11 otherwise.
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: up test lint bench light-servers native

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(MAKE) --no-print-directory light-servers
	@touch $(STAMP)

# Every student's server and kernel pays these at each start (docs/hub.md, "A class of 50"):
# - jsonschema imports rfc3987_syntax when it is installed, which builds ~35 Lark parsers at
#   import (~1.4 CPU s of a server's ~3.5); it only checks the "iri" formats, which no Jupyter
#   event schema uses. jupyter_events asks for it through jsonschema's optional format-nongpl
#   extra: without it jsonschema skips those formats (`pip check` stays clean).
# - servers and kernels run as the students' uids, which cannot write __pycache__ into this
#   checkout: without bytecode made here, each one compiles the modules root never imported.
light-servers:
	$(BIN)/python -m pip uninstall --quiet --yes rfc3987-syntax 2>/dev/null || true
	$(BIN)/python -m compileall -q -j0 hub_extension kernel_ext scheduler labhive >/dev/null

## native: compile the simulator's hot modules with mypyc (scheduler/native/): 37-45% less CPU
## at 1M contended jobs, the same decisions. Optional: without a C compiler, a warning and plain
## Python. A no-op while the build matches the sources; `LABHIVE_PURE=1` runs the sources anyway.
native: $(STAMP)
	@$(BIN)/python -m labhive.scheduler.native.build build --optional

# The course material every user finds in their home (labs/ -> ~/labs/) and its data.
COURSE      ?= labs
COURSE_DATA ?= $(wildcard ../shared/data)

## up: start the platform on its embedded defaults
up: $(STAMP) native
	@command -v configurable-http-proxy >/dev/null || \
		npm install -g --no-fund --no-audit --loglevel=error configurable-http-proxy
	@echo "labhive, papermill and jupyter are in $(abspath $(BIN)); in another shell:"
	@echo '  export PATH="$(abspath $(BIN)):$$PATH"'
	$(BIN)/labhive up --course $(COURSE) $(if $(COURSE_DATA),--course-data $(COURSE_DATA))

## test: install what the tests need (system packages too), lint, type-check, run the whole suite
## (compiled, when built; then the white-box `sources` tests once more, on the sources)
test: $(STAMP)
	bash .ci/deps.sh
	$(MAKE) --no-print-directory native
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest
# the white-box tests (marked `sources`) skip against the compiled modules: run them on the sources
	if $(BIN)/python -m labhive.scheduler.native.build check; then \
		LABHIVE_PURE=1 $(BIN)/python -m pytest -m sources; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP) native
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done
