#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go: the GPU tests (quantization through torchao, the
# int8 draft's exact distribution and the int8 KV cache on CUDA, the bitmask kernel), then the
# quantization table on the GPU (fp32, bf16, int8, int4, the int8 cache, the quantized drafts).
# Needs `pip install -e '.[test,gpu]'` and the default model (`structgen fetch`).
# Usage: bash benchmarks/gpu_check.sh [ROUNDS]   (writes benchmarks/results/quantization-cuda.json)
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')" || exit 2
python3 -m pytest -q -p no:cacheprovider -rs tests/generate/test_quantize.py tests/masks/test_bitmask.py -k "gpu or cuda"
tests=$?
python3 benchmarks/quantization.py --device cuda --rounds "${1:-3}" --tokens 48
exit $(( tests || $? ))
