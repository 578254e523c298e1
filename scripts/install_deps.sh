#!/usr/bin/env bash
# Installs what fusedtrain needs to build, test and train on a Debian/Ubuntu machine.
# Idempotent: packages already present are left alone. The CUDA toolkit is not installed here;
# without nvcc the library builds CPU-only.
set -euo pipefail
packages=(cmake ninja-build g++ libeigen3-dev libgtest-dev zlib1g-dev dataset-fashion-mnist ccache libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
