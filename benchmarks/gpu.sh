#!/usr/bin/env bash
# Everything the scale issue measures on a GPU, in one call; each result lands in OUT as a text file.
#   bash benchmarks/gpu.sh [OUT]        (expects dgmoe importable, e.g. `pip install -e .` or PYTHONPATH=src)
# Not yet run: no GPU has been lent to a dgmoe session so far. Budget: about 25 minutes on one H100.
set -euo pipefail
OUT=${1:-runs/gpu}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
python -c "import torch, timm; print(torch.__version__, timm.__version__, torch.cuda.get_device_name())" > "$OUT/versions.txt"
# timm equivalence (ViT, hybrid R26) and the CUDA dispatch paths: skipped on CPU, run here.
python -m pytest -q -m "gpu or not gpu" tests/test_core_models.py tests/test_sfmoe.py tests/test_core_moe.py \
  -k "timm or cuda" > "$OUT/equivalence.txt" 2>&1 || echo "equivalence tests FAILED, see $OUT/equivalence.txt"
# MoE layer vs its limit, ViT-S dims at batch 32 and at the paper's 160 images (target <= 1.15x, < Tutel-style).
for precision in fp32 bf16; do
  for tokens in 6304 31520; do
    dgmoe bench layer --device cuda --precision "$precision" --tokens "$tokens" --rounds 30 --repeats 3 \
      > "$OUT/layer_${precision}_${tokens}.txt"
  done
done
# Whole models at the paper's mini-batch (GMoE Table 16: 160 images), eager and compiled; then memory.
dgmoe bench models --device cuda --precision bf16 --batch-size 160 --rounds 20 --repeats 3 > "$OUT/models_bf16.txt"
dgmoe bench models --device cuda --precision bf16 --batch-size 160 --rounds 20 --compile > "$OUT/models_bf16_compile.txt"
dgmoe bench models --device cuda --precision fp32 --batch-size 160 --rounds 20 > "$OUT/models_fp32.txt"
dgmoe bench memory --device cuda --precision bf16 --batch-sizes 32,96,160 \
  --models vit_small_patch16_224,gmoe_small_patch16_224,sfmoe_small_patch16_224,moge_small_patch16_224 > "$OUT/memory_bf16.txt"
echo "done: $OUT"
