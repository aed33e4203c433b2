#!/usr/bin/env bash
# SF-MoE Fig. 4 (right) at low resolution on PACS: [S,F]x6 vs [S]x12 vs all-dense ([F]x12), 3 trial seeds,
# one held-out domain, a narrow width (96) so that it runs on a CPU. Usage:
#   bash benchmarks/sfmoe_layouts.sh [DATA_DIR] [OUT_DIR] [TEST_ENV]
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${2:-runs/sfmoe_layouts}
TEST_ENV=${3:-0}
WORKERS=${WORKERS:-2}
dgmoe data prepare --dataset PACS --data-dir "$DATA" --img-size 32
for layout in "[S,F]x6" "[S]x12" "[F]x12"; do
  name=$(echo "$layout" | tr -d '[],' )
  dgmoe sweep launch --datasets PACS --algorithms ERM --models sfmoe_small_patch16_224 \
    --n-hparams 1 --n-trials 3 --single-test-envs --only-test-envs "$TEST_ENV" --steps 200 --checkpoint-freq 100 \
    --img-size 32 --patch-size 8 --hparams '{"lr": 0.0005}' \
    --train-args "--model-kwargs '{\"moe_layers\": \"$layout\", \"embed_dim\": 96, \"num_heads\": 3}'" \
    --data-dir "$DATA" --output-dir "$OUT/$name" --launcher local --max-workers "$WORKERS" --exec-args "--num-threads 1"
done
dgmoe results "$OUT" --selection iid
