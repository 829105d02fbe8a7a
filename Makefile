# Set-up commands on a fresh clone: `make run`, `make check` and `make test`.
# Each creates .venv and installs what it needs.
# `make check` (minutes, no Ray, no system packages): before each commit.
# `make test` (the whole suite, what CI runs): before merging. docs/testing.md says more.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_TOOLS := prometheus promtool wrk chromium chromedriver redis-server gpg strace docker-registry
SYSTEM_PACKAGES := prometheus wrk chromium chromium-driver redis-server gnupg strace docker-registry

.PHONY: run check test test-repeat test-ray-oldest test-vllm docs v2-proto hello-proto lint lint-imports typecheck ruff system-deps bench reliability soak clean

# pip writes the bytecode of the packages it installs, but not of an editable install's source tree;
# where PYTHONDONTWRITEBYTECODE is set (as in CI) every process would then compile the modules it
# imports, each time: a proxy's start took 0.18 s more CPU, a replica's 0.08 s, over ~800 of them in
# the real tier. Compiling them once here takes about a second. Not the files that are data: the
# spec corpus (a module with a syntax error on purpose) and the examples `gitops init` copies (the
# wheel would ship their bytecode, and the copies would carry it).
# The packages are pyproject.toml's, not a copy of its list.
SOURCES = $(shell $(PYTHON) -c "import tomllib; print(*(p.rstrip('*') for p in tomllib.load(open('pyproject.toml', 'rb'))['tool']['setuptools']['packages']['find']['include']))") bench tests

# The checkout installed editable. setuptools maps the packages of this flat layout with an
# import finder and prints a notice ("Editable installation ... folders with the same name as
# your package may take precedence"): here those folders are the packages, so that one notice
# is silenced; its alternative, the checkout's root on sys.path, would let the example
# `deployments` package shadow a served repository's own.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	$(PY) -m compileall -q -j 0 -x "tests/spec_corpus/|init-examples/" $(SOURCES)
	touch $(STAMP)

# Flags go through ARGS: make run ARGS="--proxy-port 18000 --admin-port 18001"
run: $(STAMP)
	$(VENV)/bin/gitops run $(ARGS)

# Installs the Debian packages the real tests need when they are missing and we
# are root (as in CI); otherwise says what to install and stops.
system-deps:
	@missing=""; for tool in $(SYSTEM_TOOLS); do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages for the real tests:$(SYSTEM_PACKAGES)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; \
	  else \
	    echo "missing:$$missing"; \
	    echo "install them with: sudo apt-get install $(SYSTEM_PACKAGES)"; \
	    exit 1; \
	  fi; \
	fi

# The tiers (tests.support.tiers), fastest first, each its own pytest: lint, pure
# and component side by side (each one's output shown whole when it ends), then
# the others one after another; the system packages are installed only before
# the real tiers. Ends with the time per tier and the 30 slowest tests; fails if
# any tier (or lint) failed.
TIERS_RUN := $(PY) -m tests.support.runner
LINT_ALONGSIDE := --alongside "$(MAKE) --no-print-directory lint"

# The gate a contributor runs: lint, and every test that needs no Ray (pure,
# component, and the no-Ray tests of security and bench); no system packages.
check: $(STAMP)
	$(TIERS_RUN) $(LINT_ALONGSIDE) pure component

# The whole suite: lint, pure and component, then (after system-deps) real and slow.
test: $(STAMP)
	$(TIERS_RUN) $(LINT_ALONGSIDE) --before-real "$(MAKE) --no-print-directory system-deps" pure component real slow

# The real tier N times in a row (flakes are defects): make test-repeat N=3.
# REPEAT_TIERS="real slow" repeats the slow tier too.
N ?= 3
REPEAT_TIERS ?= real
test-repeat: $(STAMP) system-deps
	@failed=""; for i in $$(seq $(N)); do echo "== run $$i of $(N)"; \
	  $(TIERS_RUN) --artifacts test-artifacts/tiers/repeat-$$i $(REPEAT_TIERS) || failed="$$failed $$i"; done; \
	if [ -n "$$failed" ]; then echo "failed in run(s):$$failed"; exit 1; fi

# Static checks, before any test runs: the layering contracts, the type checker, the linter.
lint: lint-imports typecheck ruff

# The layering contracts of pyproject.toml [tool.importlinter]: a broken layer fails the build.
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache

# mypy over the packages, docgen and bench as pyproject.toml [tool.mypy] says (0 errors).
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# ruff with the rules of pyproject.toml [tool.ruff] over the whole tree.
ruff: $(STAMP)
	$(VENV)/bin/ruff check --no-cache .

# The fault scenarios of tests/reliability with a longer steady load around
# each fault; writes the "What we survive" table to docs/reports/reliability.md from
# the numbers the run recorded (written even when a scenario fails, which
# the table then shows), and fails if any scenario failed.
RELIABILITY_LOAD_S ?= 15
RELIABILITY_RESULTS := test-artifacts/reliability.jsonl
reliability: $(STAMP) system-deps
	rm -f $(RELIABILITY_RESULTS)
	GITOPS_RELIABILITY_LOAD_S=$(RELIABILITY_LOAD_S) GITOPS_RELIABILITY_RESULTS=$(RELIABILITY_RESULTS) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/reliability; status=$$?; \
	GITOPS_RELIABILITY_LOAD_S=$(RELIABILITY_LOAD_S) $(PY) -m tests.reliability.report $(RELIABILITY_RESULTS) docs/reports/reliability.md \
	  && exit $$status

# The chaos soak (bench/soak.py): steady mixed load through the real proxy while a
# seeded random fault lands every 20-60 s, memory sampled every 10 s; writes
# docs/reports/soak.md (the table, the memory slopes and docs/reports/soak-memory.png) and
# fails on an unexplained failed request, a leak or a memory slope above its
# bound. `make test` runs a short one, 45 s of load (tests/reliability/test_s12_soak.py).
SOAK_MINUTES ?= 20
SOAK_SEED ?= 34
soak: $(STAMP) system-deps
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench]'
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --doc docs/reports/soak.md

# Regenerates the reference pages of docs/ from the code (a test fails when they are stale).
docs: $(STAMP)
	$(PY) -m docgen

# Regenerates the v2 gRPC messages from KServe's vendored .proto (ray_gitops/v2/proto/README.md says
# why this grpcio-tools: its gencode must match the protobuf runtime's major version). A dev tool only.
V2_PROTO := ray_gitops/v2/proto
v2-proto: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check 'grpcio-tools==1.85.1'
	cd $(V2_PROTO) && $(abspath $(PY)) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. grpc_predict_v2.proto
	sed -i 's/_descriptor_pool.Default()/_descriptor_pool.DescriptorPool()/' $(V2_PROTO)/grpc_predict_v2_pb2.py

# Regenerates the example gRPC service of docs/guides/grpc.md (deployments/apps/helloworld.proto) and the
# tests' copy (tests/real/apps, imported as top-level modules there), with the same grpcio-tools. A dev tool only.
hello-proto: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check 'grpcio-tools==1.85.1'
	$(abspath $(PY)) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. deployments/apps/helloworld.proto
	sed -i 's/_descriptor_pool.Default()/_descriptor_pool.DescriptorPool()/' deployments/apps/helloworld_pb2.py
	$(abspath $(PY)) -m grpc_tools.protoc -Ideployments/apps --python_out=tests/real/apps --grpc_python_out=tests/real/apps deployments/apps/helloworld.proto

# The real-tier smoke subset against the oldest Ray of the supported range
# (the lower bound of `ray` in pyproject.toml), in a venv of its own.
RAY_OLDEST = $(shell $(PYTHON) -c "import re, tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(next(re.search(r'>=([0-9.]+)', d)[1] for d in deps if d.startswith('ray')))")
OLDEST_VENV := .venv-ray-oldest

test-ray-oldest: system-deps
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 'ray==$(RAY_OLDEST)'
	$(OLDEST_VENV)/bin/python -c "import ray; assert ray.__version__ == '$(RAY_OLDEST)', ray.__version__"
	$(OLDEST_VENV)/bin/python -m pytest -q -p no:cacheprovider -m smoke tests/real

# The vLLM adapter's tests against vLLM's own interfaces (tests/component/test_vllm_adapter.py), in a
# venv of its own: vLLM is no dependency of ray-gitops, and with torch it is gigabytes to download.
# On a machine with a GPU, RAY_GITOPS_VLLM_MODEL (a local model directory) adds a real generation.
VLLM_VENV := .venv-vllm

test-vllm:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[test,vllm]'
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider -rs tests/component/test_vllm_adapter.py

# Every measurement of issue 15, side by side with Ray Serve: writes
# bench/results/latest.json, bench/results/REPORT.md and its plots (about
# half an hour on 2 cores). wrk loads HTTP; haproxy is for Serve's HAProxy
# mode (ray[serve] ships one too; the Debian one is installed when root).
bench: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench]'
	@$(MAKE) --no-print-directory system-deps SYSTEM_TOOLS="wrk haproxy docker-registry" SYSTEM_PACKAGES="wrk haproxy docker-registry"
	$(PY) -m bench.report

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(VLLM_VENV) .pytest_cache .hypothesis .mypy_cache test-artifacts build
