#!/usr/bin/env bash
# How these folders were written: by dgmoe 0.2.0's own code (commit ee15d85, the last of 2026-11-23), so that the
# tests can show what a user's 0.2.0 run and sweep folders do under this dgmoe (tests/engine/test_reads_0_2_0.py).
# Regenerate (from a checkout of this repository): bash tests/golden/written_by_0.2.0/make.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
old=$(mktemp -d)
git worktree add -q "$old/src0" ee15d85
work=$(mktemp -d)
cd "$work"
kwargs='{"depth": 1, "embed_dim": 24, "num_heads": 2}'
for h in 0 1; do
  PYTHONPATH="$old/src0/src" python -m dgmoe train --dataset RotatedMNIST --model vit_micro_patch7_28 \
    --model-kwargs "$kwargs" --steps 3 --checkpoint-freq 2 --n-per-domain 12 --progress none --num-threads 1 \
    --hparams-seed $h --test-envs 0 --output-dir runs/erm_h$h
done
PYTHONPATH="$old/src0/src" python -m dgmoe sweep launch --datasets RotatedMNIST --algorithms ERM \
  --models vit_micro_patch7_28 --n-hparams 1 --n-trials 1 --only-test-envs 0 --launcher local --output-dir sweeps \
  -- --steps 2 --checkpoint-freq 2 --n-per-domain 12 --num-threads 1 --model-kwargs "$kwargs"
find . -name .dgmoe.lock -delete
rm -rf "$here/runs" "$here/sweeps" && cp -r runs sweeps "$here/"
git -C "$here" worktree remove --force "$old/src0"
