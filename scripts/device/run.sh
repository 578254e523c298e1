#!/usr/bin/env bash
# The device runner: on the GPU machine, build once with every core, run the named suites, and
# print their summary table last (also in $OUT/summary.txt; every log in $OUT/logs.tgz).
#   scripts/device/run.sh SUITE[:ARG] [SUITE[:ARG] ...]
# Suites (scripts/device/suites/<name>.sh, each opening with what it runs):
#   tests      the GoogleTest suite on the GPU (ARG: a GoogleTest filter, to run only those)
#   mlp        ft-mlp's epoch in both kernel modes against its PyTorch peer
#   ops        ft-bench ops and adamw against their PyTorch peers
#   gpt2       parity with PyTorch, exact resume, attention against SDPA, gpt2 against torch.compile
#   llama      Llama: parity with transformers in both modes, LoRA against PEFT, the tokenizer
#              (ARG checks, the default), ft-bench llama against torch.compile (bench), or all
#   lora       the LoRA tests, parity with PEFT, resume, ft-bench lora against its PyTorch peer
#   dlrm       ft-dlrm's benches against the PyTorch peers, AUC fused against unfused
#   unfused    every bench in both kernel modes with its peers (the README's pictures)
#   sanitize   compute-sanitizer's four tools over the GPU tests
#   multigpu   data parallelism on several GPUs (ARG: functional, scaling, sharded, tune or all)
#   dp         data parallelism's checks on one GPU
#   large      models larger than one GPU: gpt2 d48 with recomputation, Llama-3.1-8B's shape on every
#              GPU against PyTorch FSDP2 (ARG: gpt2, llama or all)
#   profile    Nsight Compute on the memory-bound ops and the optimizer step
# Fashion-MNIST is read from data/fashion-mnist: carry it.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -eq 0 ] || [ "$1" = --help ] || [ "$1" = -h ]; then sed -n '2,/^# Fashion/p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
source scripts/device/lib.sh
for spec in "$@"; do
  [ -f "scripts/device/suites/${spec%%:*}.sh" ] || { echo "no suite '${spec%%:*}' (scripts/device/run.sh --help)"; exit 2; }
done
mkdir -p "$out" "$B"
rm -rf "$B/logs" && mkdir -p "$B/logs"
summary=$B/logs/summary.txt
trap 'cp "$summary" "$out/summary.txt" 2>/dev/null; tar czf "$out/logs.tgz" -C "$B" logs' EXIT
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader >"$B/logs/gpus.txt"
row "== fusedtrain on the device: $* ($(date -u +%F), $(gpu_count) x $(gpu_name)) =="
logs=$B/logs
phase build
build || { tail -40 "$logs/build.log"; row "BUILD FAILED"; exit 1; }
phase built
rc=0
for spec in "$@"; do
  name=${spec%%:*}
  arg=$([ "$spec" != "$name" ] && echo "${spec#*:}" || true)
  logs=$B/logs/$name
  mkdir -p "$logs"
  phase "suite $spec"
  row ""
  (SUITE_ARG=$arg; source "scripts/device/suites/$name.sh")
  suite_rc=$?
  [ $suite_rc -eq 0 ] || { row "suite $spec: exit status $suite_rc"; rc=1; }
done
phase done
echo
cat "$summary"
exit $rc
