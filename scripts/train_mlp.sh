#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, and train the MLP on
# Fashion-MNIST (on the GPU when there is one, otherwise on the CPU). Extra arguments go to
# ft-mlp (see ft-mlp --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/examples/ft-mlp "$@"
