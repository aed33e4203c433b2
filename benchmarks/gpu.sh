#!/usr/bin/env bash
# Every GPU measurement of docs/benchmarks.md, section 12, in one call:
#   PYTHONPATH=src bash benchmarks/gpu.sh [OUT] [STAGES] [SECONDS]   (or with dgmoe installed: `pip install -e .`)
# A GPU machine without network access needs the mlxtend and submitit wheels: `pip install --no-deps` them first.
# STAGES: any of "tests syncs default top1 layer models memory data profile compile graphs" (default: all, in
# that order; the seven stages before syncs, default, top1 and graphs took about 8 minutes on an H100, the four
# are not yet timed on a device: pass a budget that fits or fewer stages). MODELS, MEMORY_MODELS, DATA_MODELS,
# COMPILE_MODELS (the models of those stages), DATA_WORKERS (0,4) and TRAIN_WORKERS (0) adjust them.
#   syncs:   host syncs per fp32/TF32 training step of GMoE-S/16, SF-MoE-S/16, MoGE-S (`dgmoe bench syncs`; the
#            gpu tests hold them to 0 under set_sync_debug_mode("error"))
#   default: the GPU user's default command, `dgmoe train` with no --device (auto: CUDA) in fp32 and in tf32,
#            its img/s beside the model step's (`dgmoe bench data`), and the GMoE/ViT train-step ratio per
#            precision with peak memory measured (`dgmoe bench models`, torch.cuda.max_memory_allocated)
#   top1:    GMoE-S/16 top-1 (GMoE's inference configuration) inference vs ViT-S/16, bf16 and fp32
#   graphs:  the whole-model table eager / compiled / graphed (--compile-mode reduce-overhead: CUDA graphs),
#            bf16 and tf32
# Each stage writes OUT/<stage>.txt under its own time limit, cut to what is left of SECONDS (the
# whole run's budget, default 540), so one slow stage cannot eat the others and the run ends in time.
set -uo pipefail
export TRITON_INTERPRET=0  # the Triton kernels compiled for the GPU (the CPU test suite interprets them)
DGMOE="python -m dgmoe"   # works without an installed `dgmoe` executable (with PYTHONPATH=src)
OUT=${1:-runs/gpu}
STAGES=${2:-tests syncs default top1 layer models memory data profile compile graphs}
MODELS=${MODELS:-vit_small_patch16_224,gmoe_small_patch16_224,sfmoe_small_patch16_224,moge_small_patch16_224}
DATA_MODELS=${DATA_MODELS:-vit_small_patch16_224 gmoe_small_patch16_224}
COMPILE_MODELS=${COMPILE_MODELS:-vit_small_patch16_224,gmoe_small_patch16_224}
BUDGET=${3:-540}
want() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT"
stage() {
  local name=$1 limit=$2 left=$((BUDGET - SECONDS - 5)); shift 2
  (( left < limit )) && limit=$left
  (( limit < 15 )) && { echo "== $name: skipped, $left s of the budget left"; return; }
  echo "== $name (limit ${limit} s, at ${SECONDS} s)"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1 || echo "   $name: exit $? (see $OUT/$name.txt)"
  tail -n 25 "$OUT/$name.txt"
}
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())" \
  > "$OUT/versions.txt" 2>&1; cat "$OUT/versions.txt"
# 1. correctness on CUDA: the sync-free dispatch, zero host syncs per training update (GMoE, SF-MoE, MoGE), the
#    CUDA dispatch paths, device-side augmentation and the step loop with its background loader
want tests && stage gpu_tests 100 python -m pytest -q -m gpu tests/moe tests/data/test_data_loaders.py \
  tests/bench/test_bench_gpu_checks.py
# 1b. host syncs per training step in the GPU user's fp32 and TF32 (bf16 beside), batch 96 at 224 px
want syncs && stage syncs 90 $DGMOE bench syncs --device cuda --precisions fp32,tf32,bf16 \
  --models gmoe_small_patch16_224,sfmoe_small_patch16_224,moge_small_patch16_224
# 1c. the default command: no --device (auto), fp32 (DomainBed's) and tf32; the data folder of stage 4 first
if want default || want data; then
if [ ! -d "$OUT/PACS_fake" ]; then
python - "$OUT/PACS_fake" <<'PY'
import sys, numpy as np
from pathlib import Path
from PIL import Image
root, rng = Path(sys.argv[1]) / "PACS", np.random.default_rng(0)
for d in ("art_painting", "cartoon", "photo", "sketch"):
    for c in ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person"):
        (root / d / c).mkdir(parents=True, exist_ok=True)
        for i in range(60):
            Image.fromarray(rng.integers(0, 255, (227, 227, 3), dtype=np.uint8)).save(root / d / c / f"{i}.jpg")
PY
stage prepare 40 $DGMOE data prepare --dataset PACS --data-dir "$OUT/PACS_fake" --img-size 224
fi
fi
if want default; then
for precision in fp32 tf32; do
  stage "default_models_$precision" 90 $DGMOE bench models --precision "$precision" --batch-size 96 --rounds 10 \
    --models vit_small_patch16_224,gmoe_small_patch16_224
  for model in $DATA_MODELS; do
    stage "default_data_${model}_$precision" 60 $DGMOE bench data --dataset PACS --data-dir "$OUT/PACS_fake" \
      --model "$model" --precision "$precision" --workers 0 --timed-steps 30
    stage "default_train_${model}_$precision" 60 $DGMOE train --dataset PACS --data-dir "$OUT/PACS_fake" \
      --model "$model" --precision "$precision" --steps 300 --checkpoint-freq 150 --progress lines --log-every-s 3 \
      --output-dir "$OUT/runs/default_${model}_$precision"
  done
done
fi
# 1d. GMoE's top-1 inference configuration (GMoE, Table 16) against ViT-S/16: the "inference vs ref" column
if want top1; then
for precision in bf16 fp32; do
  stage "top1_$precision" 90 $DGMOE bench models --device cuda --precision "$precision" --batch-size 96 --rounds 10 \
    --models vit_small_patch16_224,gmoe_small_patch16_224 --model-kwargs '{"gmoe_small_patch16_224": {"top_k": 1}}'
done
fi
# 2. the MoE layer at ViT-S dims, T = 96 x 197, bf16: the layer as a model runs it (eager and compiled), the
#    dispatch alone, the router alone, the peers; then where each one's time goes (kernels, host or device bound)
want layer && stage layer_bf16 130 $DGMOE bench layer --device cuda --precision bf16 --tokens 18912 --rounds 10 --repeats 1 \
  --paths "moe grouped (default),moe grouped (default) compiled,moe Triton kernels,dispatch sync-free grouped_mm,transformers-style eager loop,transformers grouped_mm experts,router alone"
#    the same layer in the GPU user's fp32 and TF32: the path the chooser takes (Triton kernels with triton, else
#    the fixed-shape dispatch), each forced, the Triton kernels with autotuned and with fixed 64x64x32 tiles, the
#    compiled layer (the chooser's compiled fp32/TF32 path: the Triton kernels' custom operators in the graph)
#    beside the compiled Triton and padded paths forced, and the sorted per-expert loop that reads counts back
for precision in tf32 fp32; do
  want layer && stage "layer_$precision" 200 $DGMOE bench layer --device cuda --precision "$precision" --tokens 18912 \
    --rounds 10 --repeats 1 --paths "moe grouped (default),moe Triton kernels,moe Triton kernels fixed tiles,moe fixed-shape padded,moe sorted per-expert,moe grouped (default) compiled,moe Triton kernels compiled,moe fixed-shape padded compiled,router alone"
done
want layer && stage layer_profile 60 python benchmarks/profile_layer.py
#    MoA's layer (KAdaptation experts on a d -> 3d qkv, top-1) at ViT-B/16's width in fp32: MoA's dense-then-mask,
#    dgmoe's sorted loop (reads counts back) and its fixed-shape adapter path (the CUDA default)
want layer && stage layer_moa_fp32 90 $DGMOE bench layer --device cuda --precision fp32 --tokens 18912 --dim 768 \
  --rounds 10 --repeats 1 --paths "moa dense-then-mask (MoA's code),moa sorted per-expert (dgmoe),moa fixed-shape (dgmoe)"
# 3. whole models, batch 96 at 224 px, bf16: eager, then compiled block by block; then peak memory
want models && stage models_bf16 120 $DGMOE bench models --device cuda --precision bf16 --batch-size 96 --rounds 10 --models "$MODELS"
want memory && stage memory_bf16 80 $DGMOE bench memory --device cuda --precision bf16 --batch-sizes 96 --models "${MEMORY_MODELS:-$MODELS}"
want memory && stage memory_fp32 80 $DGMOE bench memory --device cuda --precision fp32 --batch-sizes 96 --models "${MEMORY_MODELS:-$MODELS}"
# 4. the data path: a PACS-shaped folder of random JPEGs (4 domains x 7 classes x 60 images), cached at 224 px;
#    loader and training-loop img/s per worker count beside the model step's, then `dgmoe train` itself.
#    DATA_FLAGS (e.g. --compile, --fused-optimizer) go to both commands; DATA_TAG (e.g. _compiled) names their
#    outputs. (The folder is made in 1c.)
if want data; then
for model in $DATA_MODELS; do
  stage "data_$model${DATA_TAG:-}" 75 $DGMOE bench data --dataset PACS --data-dir "$OUT/PACS_fake" --model "$model" \
    --device cuda --precision bf16 --workers "${DATA_WORKERS:-0,4}" --timed-steps 30 ${DATA_FLAGS:-}
  stage "train_$model${DATA_TAG:-}" 60 $DGMOE train --dataset PACS --data-dir "$OUT/PACS_fake" --model "$model" \
    --device cuda --precision bf16 --num-workers "${TRAIN_WORKERS:-0}" --steps 300 --checkpoint-freq 150 --progress lines \
    --log-every-s 3 --output-dir "$OUT/runs/$model${DATA_TAG:-}" ${DATA_FLAGS:-}
done
fi
# 5. where the step's time goes (torch.profiler tables, and how busy the GPU is; the training loop's too), then
#    whole models compiled block by block
want profile && stage profile 60 python benchmarks/profile_step.py gmoe_small_patch16_224 sfmoe_small_patch16_224 \
  moge_small_patch16_224
want profile && want data && stage loop_profile 60 python benchmarks/profile_loop.py --data-dir "$OUT/PACS_fake" \
  --model gmoe_small_patch16_224
want compile && stage models_bf16_compile 200 $DGMOE bench models --device cuda --precision bf16 --batch-size 96 --rounds 10 --compile \
  --models "$COMPILE_MODELS"
# 6. the whole-model table eager / compiled / graphed: the compiled blocks replayed as CUDA graphs
#    (--compile-mode reduce-overhead), beside stage 3's eager and stage 5's compiled rows; tf32 all three
if want graphs; then
  stage models_bf16_graphed 200 $DGMOE bench models --device cuda --precision bf16 --batch-size 96 --rounds 10 \
    --compile --compile-mode reduce-overhead --models "$COMPILE_MODELS"
  stage models_tf32 90 $DGMOE bench models --device cuda --precision tf32 --batch-size 96 --rounds 10 \
    --models "$COMPILE_MODELS"
  stage models_tf32_compile 200 $DGMOE bench models --device cuda --precision tf32 --batch-size 96 --rounds 10 \
    --compile --models "$COMPILE_MODELS"
  stage models_tf32_graphed 200 $DGMOE bench models --device cuda --precision tf32 --batch-size 96 --rounds 10 \
    --compile --compile-mode reduce-overhead --models "$COMPILE_MODELS"
fi
echo "done: $OUT at ${SECONDS} s"
