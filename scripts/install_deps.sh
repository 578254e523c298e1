#!/usr/bin/env bash
# Installs what fusedtrain needs to build, test and train on a Debian/Ubuntu machine.
# Idempotent: packages already present are left alone. The CUDA toolkit is not installed here;
# without nvcc the library builds CPU-only. With the argument `test` (the test command gives it),
# also what only the tests need: clang and its fuzzer runtime, which build the fuzz targets
# (scripts/fuzz.sh), matplotlib for scripts/plot.py's test and tokenizers for the tokenizer's.
set -euo pipefail
packages=(cmake ninja-build g++ libeigen3-dev libgtest-dev zlib1g-dev dataset-fashion-mnist ccache libgloo-dev)
for_tests=0
[ "${1:-}" = test ] && for_tests=1 && packages+=(clang)
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=0

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

install() {
  echo "installing: $*"
  if [ "$updated" -eq 0 ]; then
    $SUDO apt-get update -qq
    updated=1
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  install "${missing[@]}"
fi

# libFuzzer's runtime (libclang_rt.fuzzer) for the clang++ on the PATH: Debian 12 ships it in
# libclang-rt-N-dev (libclang-rt-dev for the default N), older releases in libclang-common-N-dev.
# The first name apt knows is taken, after refreshing its lists if it knows none.
fuzzer_runtime_package() {
  local version
  version=$(clang++ --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)
  for p in "libclang-rt-$version-dev" libclang-rt-dev "libclang-common-$version-dev"; do
    if apt-cache show "$p" >/dev/null 2>&1; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
[ "$for_tests" -eq 1 ] || exit 0
# matplotlib (scripts/plot.py's test) and tokenizers (the tokenizer's parity test) for the
# python3 on the PATH (a pyenv one, say, which does not see Debian's python3 packages).
for module in matplotlib tokenizers; do
  python3 -c "import $module" 2>/dev/null || {
    echo "installing: $module (pip)"
    python3 -m pip install --quiet --disable-pip-version-check "$module" 2>&1 | grep -v "Running pip as the 'root' user" || true
    python3 -c "import $module" || { echo "install_deps: $module did not install" >&2; exit 1; }
  }
done
runtime=$(fuzzer_runtime_package) || {
  $SUDO apt-get update -qq
  updated=1
  runtime=$(fuzzer_runtime_package) || { echo "install_deps: no package provides clang's fuzzer runtime" >&2; exit 1; }
}
installed "$runtime" || install "$runtime"
