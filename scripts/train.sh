#!/usr/bin/env bash
# The main job: installs what is missing, builds Ember (Release), fetches MNIST if it is not
# there, and trains the reference CNN for 5 epochs (on the GPU when one is usable, else CPU).
# Extra arguments go to train_mnist, e.g. scripts/train.sh --device cpu --seed 1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch_data.sh mnist
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_TESTS=OFF >/dev/null
cmake --build build/release
exec build/release/apps/train_mnist --epochs 5 "$@"
