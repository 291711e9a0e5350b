# Two commands do everything on a fresh machine with Python 3.11+:
#   make book   installs what is missing, executes every chapter, writes _build/html
#   make test   unit tests, CLI tests, then every chapter notebook under nbval on ATen's default kernel path (no
#               vector units): the pages were stored on a CPU's own vector kernels, so every verdict must come out alike
#   make lint   ruff's lint rules and its formatter's check (pyproject.toml) over src/ and tests/
#   make check  the tests under a minute: layout, claims, theory, data, models, every row's counterfactual; not those
#               marked slow (whole chapters, processes, the browser), which make test runs too
#   make site-test  opens every page of the built site (make book) in headless Chromium, installed if missing
#   make oldest  the unit tests with the oldest versions requirements.txt allows (numpy, scipy, matplotlib, the book tools)
#   make outputs  re-executes the notebooks in place (quick profile), to store the outputs nbval compares and the
#                 CI build shows, and stamps each with the digest of the figure code that drew it (NOTEBOOKS=... for some)
#   make margins  every quick row's verdict and margin on both kernel paths at one and two threads (about 40 min)
#   make reference  every chapter's reference result (2-core CPU, up to an hour per section), one section at a time
#   make results  on a GPU machine: every chapter's full profile, written to results/ for the book to show
#   make lock     rewrites requirements.lock from the venv (after a change to requirements.txt)
# PROFILE=full builds the book with the full (GPU) profile. TORCH=... picks the torch build
# installed first (default: the CPU build 2.13.0; TORCH=torch takes PyPI's default build).
# REQUIREMENTS=... picks what is installed beside it: the exact versions CI runs (requirements.lock,
# the default) or the ranges a GPU user may take (requirements.txt).

PYTHON ?= python3
PROFILE ?= quick
TORCH ?= torch==2.13.0
REQUIREMENTS ?= requirements.lock
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: book test check lint site-test slurm slurm-stop oldest outputs margins reference results lock clean


$(STAMP): requirements.txt requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

lock: $(STAMP)
	{ sed -n '1,3p' requirements.lock; $(BIN)/python -m pip list --format=freeze --exclude-editable \
		| grep -v -i -E '^(torch|pip|setuptools|wheel)=='; } > requirements.lock.new
	mv requirements.lock.new requirements.lock

# OUTPUTS=stored (CI) shows the outputs stored in the chapter notebooks, which `make test` has just checked under nbval,
# instead of executing every chapter a second time (the runs page still executes); only quick outputs are stored
book: $(STAMP)
	rm -rf _build
ifeq ($(OUTPUTS),stored)
	test "$(PROFILE)" = quick || { echo "OUTPUTS=stored holds the quick profile's outputs; PROFILE=$(PROFILE) executes"; exit 1; }
	sed -E 's/^(  exclude_patterns:) \[\]/\1 ["book\/*.ipynb"]/' _config.yml > _config.stored.yml
	grep -q 'exclude_patterns: \["book/\*.ipynb"\]' _config.stored.yml
	$(BIN)/jupyter-book build . --config _config.stored.yml --warningiserror --keep-going; \
		status=$$?; rm -f _config.stored.yml; exit $$status
else
	SANDBOXES_PROFILE=$(PROFILE) $(BIN)/jupyter-book build . --warningiserror --keep-going
endif

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check src tests

check: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -q -m "not slow" tests

# two pytest workers of one thread each (pytest-xdist): small models use a second thread poorly, a second worker well.
# The second step runs every page under nbval on ATen's default kernel path: the stored pages were made on a CPU's own
# vector kernels (make outputs), so nbval holds a second kernel path to their verdicts and printed predictions. A
# page's cells are one unit on one worker, whose kernel inherits the path and the one thread, and the pages run
# costliest first (tests/conftest.py), so both workers stay busy to the end
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --durations=40 tests
	SANDBOXES_PROFILE=quick ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 \
		--durations=20 --dist loadscope --no-loadscope-reorder --nbval --nbval-current-env book

# a one-node Slurm cluster on this machine for tests/test_slurm.py: installs Slurm, munge and MariaDB from Debian where
# missing, then starts them (as root or through sudo; about 20 s the first time, 3 s after); slurm-stop stops them
slurm:
	$(SUDO) bash tests/slurm/up.sh
slurm-stop:
	$(SUDO) bash tests/slurm/down.sh --all

# Debian's chromium, as root or through sudo; a machine without apt must have chromium on its PATH already
site-test: $(STAMP)
	command -v chromium >/dev/null || $(SUDO) apt-get install -y -q --no-install-recommends chromium \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium; }
	SANDBOXES_SITE=required $(BIN)/python -m pytest tests/test_site.py

# its own environment, each `>=X` bound of requirements.txt installed as `==X` (torch stays at $(TORCH))
OLDEST := .venv-oldest
oldest:
	rm -rf $(OLDEST) && $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --disable-pip-version-check "$(TORCH)"
	grep -v -E '^(torch|-e)' requirements.txt | sed -E 's/>=([^,; #]+)[^ #]*/==\1/' > $(OLDEST)/oldest.txt
	$(OLDEST)/bin/python -m pip install --quiet --disable-pip-version-check -r $(OLDEST)/oldest.txt
	$(OLDEST)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(OLDEST)/bin/python -m pip list --format=freeze > $(OLDEST)/installed.txt
	$(OLDEST)/bin/python -m pytest tests

NOTEBOOKS ?= book/*.ipynb
outputs: $(STAMP)
	SANDBOXES_PROFILE=quick $(BIN)/jupyter-execute --inplace $(NOTEBOOKS)
	$(BIN)/python -m sandboxes.notebook $(NOTEBOOKS)

# each quick row's verdict and margin on the native and ATen's default kernel path at one and two threads
margins: $(STAMP)
	$(BIN)/python -m sandboxes margins --jobs 2 --out results/kernel-paths

reference: $(STAMP)
	$(BIN)/python -m sandboxes list --reference | while read -r command; do \
		echo "$$command"; $(BIN)/$$command || exit 1; \
	done

results: $(STAMP)
	chapters=$$($(BIN)/python -m sandboxes list --names) || exit 1; \
	for chapter in $$chapters; do \
		$(BIN)/python -m sandboxes run $$chapter --profile full --device cuda --out results/$$chapter-full.json || exit 1; \
	done

clean:
	rm -rf _build $(VENV) $(OLDEST) runs
