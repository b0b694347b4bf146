# Two commands on a fresh machine (see README):
#   make app    set everything up and start the lecture app on http://127.0.0.1:7860
#   make test   set everything up and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: app test test-fast lab run figures bench clean install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when the project metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

app: $(STAMP)
	$(BIN)/python app.py

# JupyterLab on the project's venv kernel (as root, e.g. in a container, Jupyter wants --allow-root)
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

# two pytest workers, a test file each at a time (its module fixtures in one process): the Flower deployment
# tests wait on Flower most of their 3 minutes, so the other worker runs the rest meanwhile
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the quick loop while developing: no browser, no notebooks, nothing marked slow (a few minutes on 2 cores)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not browser" --ignore=tests/test_notebooks.py

# portable numerics: the numbers README.md shows, on every x86-64 CPU with AVX2 (docs/design.md)
run: $(STAMP)
	FEDALA_LAB_NUMERICS=portable $(BIN)/fedala-lab run --preset teach --algos fedavg,fedprox,fedala

bench: $(STAMP)
	$(BIN)/python benchmarks/round_time.py

clean:
	rm -rf $(VENV) runs .pytest_cache
