"""Condenses `ncu --csv --page details` output (stdin) to one line per profiled kernel launch:
duration, DRAM and SM throughput, occupancy, registers, launch shape, L2 hit rate and the
warp stall figures, so a device call's profile fits in a log a person can read."""
import csv
import sys

WANTED = {
    "Duration": "us",
    "DRAM Throughput": "dram%",
    "Compute (SM) Throughput": "sm%",
    "Achieved Occupancy": "occ%",
    "Theoretical Occupancy": "theo%",
    "Registers Per Thread": "regs",
    "Grid Size": "grid",
    "Block Size": "block",
    "L2 Hit Rate": "l2hit%",
    "Warp Cycles Per Issued Instruction": "cyc/issue",
    "Dynamic Shared Memory Per Block": "dsmem",
    # from --metrics, when asked for
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor%",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum": "ldsm-conf",
    "smsp__inst_executed.sum": "inst",
}

# Warp stall reasons asked for with --metrics smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio
STALL_PREFIX = "smsp__average_warps_issue_stalled_"


def main():
    lines = [l for l in sys.stdin if l.startswith('"')]
    rows = list(csv.DictReader(lines))
    launches = {}
    for r in rows:
        key = (r.get("ID"), r.get("Kernel Name"))
        name = r.get("Metric Name")
        if name.startswith(STALL_PREFIX):  # from --metrics: shown as stall:<reason>
            short = "st:" + name[len(STALL_PREFIX):].split("_per_")[0][:6]
            WANTED[name] = short
        if name in WANTED:
            value = r.get("Metric Value", "")
            if name == "Duration" and r.get("Metric Unit") == "ms":
                value = f"{float(value.replace(',', '')) * 1000:.1f}"
            elif name == "Duration" and r.get("Metric Unit") == "ns":
                value = f"{float(value.replace(',', '')) / 1000:.1f}"
            launches.setdefault(key, {})[WANTED[name]] = value
    cols = list(dict.fromkeys(WANTED.values()))
    print("id   " + " ".join(f"{c:>9}" for c in cols) + "  kernel")
    for (launch_id, kernel), m in launches.items():
        print(f"{launch_id:<4} " + " ".join(f"{m.get(c, '-'):>9}" for c in cols) + "  " + kernel[:110])


if __name__ == "__main__":
    main()
