# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both install first; `make install` is idempotent and quick when pyproject.toml and
# requirements.lock are unchanged. The Dockerfile runs the same `make install`.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
UV_VERSION := 0.13.8

# The lock is resolved for the machines and the image: CPython 3.11 on x86_64 glibc Linux.
# Regenerating keeps every pin it already has unless a pin no longer satisfies pyproject.toml;
# `make lock UPGRADE=--upgrade` moves everything to the newest allowed versions.
LOCK_OUTPUT ?= requirements.lock
LOCK_FLAGS := --extra all --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make lock"

# Kubeflow's SDK pins a `kubernetes` client the Airflow provider can't share, so it gets its own
# environment. --exclude-newer makes its transitive dependencies resolve as they did that day.
KFP_VENV     := .venv-kfp
KFP_STAMP    := $(KFP_VENV)/.installed-stamp
KFP_PACKAGES := kfp==2.17.0 kfp-kubernetes==2.17.0
KFP_RESOLVED_AS_OF := 2026-11-21
KFP_IMAGE  ?= tfopt:0.1.0
KFP_OUTPUT ?= work/kfp/model_optimization_pipeline.yaml

.PHONY: install lock demo test lint kfp clean

# The MLflow UI test drives Debian's Chromium through Playwright (Playwright's own browser download
# cannot be fetched here). It is installed once: as root (the image's build stage, CI) or via sudo.
CHROMIUM := /usr/bin/chromium
AS_ROOT  := $(if $(filter 0,$(shell id -u)),,sudo)

install: $(STAMP) $(CHROMIUM)

$(CHROMIUM):
	$(AS_ROOT) apt-get update -qq
	$(AS_ROOT) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --python $(BIN)/python --quiet -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps -e .
	touch $(STAMP)

lock:
	test -x $(BIN)/uv || { $(PYTHON) -m venv $(VENV) && \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"; }
	$(BIN)/uv pip compile --quiet pyproject.toml $(LOCK_FLAGS) $(UPGRADE) -o "$(LOCK_OUTPUT)"

demo: install
	TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m components.demo

# Two workers, a test file each at a time: the suite is one process's CPU on average (TF
# imports, subprocesses, servers starting), so two keep both cores busy. Module fixtures (an
# mlflow server, an Airflow) stay within their file's worker.
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: install
	$(BIN)/ruff check optimizer components dags tests benchmarks

# --- docs ----------------------------------------------------------------------------------
# The docs site (mkdocs.yml, docs/) into site/, warnings as errors; its reference pages are
# generated from the CLI's parsers and the config's models by docs/gen_reference.py.
# tests/test_docs.py builds it the same way, so `make test` (CI) builds it too.
.PHONY: docs docs-serve

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve
# --- end docs ------------------------------------------------------------------------------

$(KFP_STAMP): Makefile
	test -x $(KFP_VENV)/bin/python || $(PYTHON) -m venv $(KFP_VENV)
	$(KFP_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(KFP_VENV)/bin/uv pip install --python $(KFP_VENV)/bin/python --quiet \
		--exclude-newer $(KFP_RESOLVED_AS_OF) $(KFP_PACKAGES)
	touch $(KFP_STAMP)

# -P: the module's own folder (components/) must not shadow top-level imports.
kfp: $(KFP_STAMP)
	$(KFP_VENV)/bin/python -P components/kubeflow_pipeline.py \
		--image "$(KFP_IMAGE)" --output "$(KFP_OUTPUT)"

clean:
	rm -rf $(VENV) $(KFP_VENV) work .pytest_cache
