# Two set-up commands on a fresh clone: `make run` and `make test`.
# Each creates .venv and installs what it needs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_TOOLS := prometheus promtool wrk chromium chromedriver
SYSTEM_PACKAGES := prometheus wrk chromium chromium-driver

.PHONY: run test test-pure lint-imports system-deps bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gitops run

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

test: $(STAMP) system-deps lint-imports
	# The pure tier runs alone first: its conftest fails it if Ray, git, SQLite or HTTP got imported.
	$(PY) -m pytest -q -p no:cacheprovider tests/pure
	$(PY) -m pytest -q -p no:cacheprovider tests --ignore=tests/pure

# The layering contracts of pyproject.toml [tool.importlinter]: a broken layer fails the build.
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache

test-pure: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/pure tests/component

bench: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench]'
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis test-artifacts
