#!/usr/bin/env bash
# On the GPU machine: where one kernel of an eager ft-mlp run spends its warps' time, SASS line by
# line (ncu's SourceCounters: warp-state samples and their two main stall reasons for the 60 most
# sampled lines), plus the launch, occupancy and speed-of-light figures. Builds first unless
# SKIP_BUILD=1; the report (kernel.ncu-rep), the SASS table and details CSVs go to $OUT.
#   scripts/device_ncu_source.sh KERNEL_REGEX [launches to skip, default 5]
# NCU_PROGRAM="build-device/examples/ft-bench ops --only attention" profiles that command instead
# of ft-mlp (word-split; run from the repository root).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}; mkdir -p "$out"
B=build-device
data=data/fashion-mnist
if [ "${SKIP_BUILD:-0}" != 1 ]; then
BUILD_DIR=$B scripts/build.sh -DFT_MLP_DATA_DIR="$PWD/$data" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
echo "build ok"
fi
program=($B/examples/ft-mlp --device cuda --graph 0 --epochs 1 --batch 4096 --log-every 100 --data-dir "$data")
[ -n "${NCU_PROGRAM:-}" ] && read -r -a program <<<"$NCU_PROGRAM"
ncu --clock-control none --cache-control none --kernel-name-base demangled --kernel-name "regex:$1" \
  --launch-skip "${2:-5}" --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
  --import-source no -o "$out/kernel" -f "${program[@]}" >"$out/ncu.log" 2>&1 || tail -5 "$out/ncu.log"
ncu --import "$out/kernel.ncu-rep" --page details --csv >"$out/details.csv" 2>&1
ncu --import "$out/kernel.ncu-rep" --page source --csv --print-source sass >"$out/sass.csv" 2>&1
python3 - "$out/sass.csv" "$out/details.csv" <<'PY' | tee "$out/hot.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c for c in r))
hdr = rows[hdr_i]; body = rows[hdr_i + 1:]
def col(name):
    for i, c in enumerate(hdr):
        if c.startswith(name): return i
    return None
src = col("Source"); samp = col("Warp Stall Sampling (All"); execd = col("Instructions Executed")
def num(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
total = sum(num(r[samp]) for r in body if len(r) > samp)
print(f"{len(body)} sass lines, {total:.0f} samples")
order = sorted(range(len(body)), key=lambda i: -num(body[i][samp]))[:60]
reasons = [i for i, c in enumerate(hdr) if c.startswith("stall_") and "Not Issued" not in c]
for i in sorted(order):
    r = body[i]
    top = sorted(((num(r[j]), hdr[j][6:]) for j in reasons), reverse=True)[:2]
    why = " ".join(f"{n}:{v:.0f}" for v, n in top if v > 0)
    print(f"{i:5d} {num(r[samp]):7.0f} {100*num(r[samp])/total:5.1f}% ex {r[execd] if execd is not None else '':>8} {why:28} {r[src][:100]}")
for r in csv.reader(open(sys.argv[2])):
    if len(r) > 14 and r[0] != "ID" and any(k in r[12] for k in ("Duration", "Registers", "Shared Memory", "Occupancy",
                                                                   "Waves", "Block Limit", "Warp Cycles", "Active Cycles", "Elapsed Cycles",
                                                                   "Throughput", "Issue Slots", "Pipe", "Bank")):
        print(f"{r[12]:50} {r[14]:>12} {r[13]}")
PY
