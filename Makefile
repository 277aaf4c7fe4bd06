# The two commands of the README's quick start:
#   make simulate   installs koordfw and every plugin in .venv (what running needs, no extras), then
#                   schedules the example cluster
#   make test       installs the same plus the test, lint, kubernetes and plot extras, runs the linters,
#                   then every test (what CI runs)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/pyproject.toml))
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: install install-run simulate lint test fuzz bench clean kube-up

# koordfw and the plugins, editable, with only what running them needs
$(RUN_STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(PLUGIN_DIRS))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . $(addprefix -e ,$(PLUGIN_DIRS))
	touch $(RUN_STAMP)

# the same plus the extras: tests and linters, the live backend (kubernetes_asyncio), plots (matplotlib)
$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,kubernetes,bench]' $(addprefix -e ,$(PLUGIN_DIRS))
	touch $(STAMP)

install-run: $(RUN_STAMP)

install: $(STAMP)

simulate: install-run
	$(BIN)/koordfw simulate examples/colocation

# ruff (rules in pyproject.toml), the import contracts (tool.importlinter: the core imports no engine,
# plugins reach no engine, agent or command) and mypy over koordfw and every plugin (tool.mypy: every def
# annotated, disallow_untyped_defs)
lint: install
	$(BIN)/ruff check koordfw plugins tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# one pytest process over every suite (tests/ and each plugin's tests/): --import-mode=importlib in pyproject.toml
# names each test module by its path, so plugin test folders may share module names (test_args.py, conftest.py)
# The real control plane's tests (tests/realkube) need kube-apiserver, kube-controller-manager, kube-scheduler
# and etcd: scripts/kube-binaries.sh provides them ($$KUBEBUILDER_ASSETS when set, else a cache outside the
# checkout, filled from ../shared/kubernetes or built from Debian's source package) and prints the folder
test: install lint
	KUBEBUILDER_ASSETS="$$(bash scripts/kube-binaries.sh)" $(BIN)/python -m pytest -q tests $(addsuffix /tests,$(PLUGIN_DIRS))

# the hostile-input property tests with many more examples than CI runs (KOORDFW_FUZZ_EXAMPLES)
FUZZ_EXAMPLES ?= 1000
fuzz: install
	KOORDFW_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q tests/test_fuzz_inputs.py \
	  tests/agent/test_hostile_state.py tests/kube/test_extender_hostile.py

# a real control plane on this machine with koordfw from deploy/ on simulated nodes (koordfw dev-cluster);
# prints a kubeconfig; Ctrl-C stops everything
kube-up: install
	KUBEBUILDER_ASSETS="$$(bash scripts/kube-binaries.sh)" $(BIN)/koordfw dev-cluster --deploy deploy

bench: install
	$(BIN)/python bench/throughput.py --table

clean:
	rm -rf $(VENV)
