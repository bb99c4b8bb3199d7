#!/usr/bin/env bash
# Rebuild assets/generator/ (the generator the Sample tab uses before any run has one):
# train the project's own CLI on the bundled MNIST subset on the CPU, then copy the
# pickle-free pair (generator.safetensors + generator.json) into assets/generator/.
#   usage: tools/make_shipped_generator.sh [STEPS] [RUN_DIR]
set -euo pipefail
# Torch's default threads: on a quiet 2-core machine two threads beat one, on a busy one they
# collapse, so set OMP_NUM_THREADS=1 there (lab/bench_threads.py; lab/README.md, "Earlier results").
STEPS="${1:-3000}"
RUN_DIR="${2:-/tmp/shipgen}"
cd "$(dirname "$0")/.."
rm -rf "$RUN_DIR"
python -m core.train --dataset bundled-mnist --gan dcgan --preset fast --device cpu --precision fp32 \
    --seed 0 --steps "$STEPS" --checkpoint-every "$STEPS" --grid-every 250 --run-dir "$RUN_DIR"
mkdir -p assets/generator
cp "$RUN_DIR/generator.safetensors" "$RUN_DIR/generator.json" assets/generator/
ls -l assets/generator/
