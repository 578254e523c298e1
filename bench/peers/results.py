"""The peers' --json output: their measurements as the document scripts/plot.py's `bench` mode and
`ft-bench --peers` read, {"device": GPU name, "date": UTC YYYY-MM-DD, "results": [{"workload",
"variant", "ms", optional numeric extras such as "peak_gb", "tok_per_s"}]}. Imports torch only in
device_name(), so the format can be written and tested without it."""
import datetime
import json
import math
import os


def add_json_argument(parser):
    parser.add_argument("--json", metavar="PATH",
                        help="also write the results to PATH as JSON for scripts/plot.py and ft-bench --peers")


def device_name(device="cuda"):
    """The GPU's name as torch.cuda.get_device_name() gives it (ft-bench writes the same string, so
    plot.py accepts the two files together); "cpu" for a CPU smoke run."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_result(index, result):
    """Raises ValueError naming results[index] unless it is a result plot.py accepts: named workload
    and variant, positive ms, every other field a finite number."""
    where = f"results[{index}] {result!r}"
    if not isinstance(result, dict):
        raise ValueError(f"{where}: not a dict")
    for key in ("workload", "variant"):
        if not isinstance(result.get(key), str) or not result[key]:
            raise ValueError(f"{where}: needs a non-empty string \"{key}\"")
    if not is_number(result.get("ms")) or result["ms"] <= 0:
        raise ValueError(f"{where}: \"ms\" must be a positive number, not {result.get('ms')!r}")
    for key, value in result.items():
        if key not in ("workload", "variant") and not is_number(value):
            raise ValueError(f"{where}: \"{key}\" must be a finite number, not {value!r}")


def write_results(path, device, results):
    """Writes the results document to `path`, dated today (UTC). Through PATH.tmp and a rename, so
    a reader never sees half a file, and a bad result leaves no file at all."""
    if not isinstance(device, str) or not device:
        raise ValueError(f"device must be a non-empty string, not {device!r}")
    for index, result in enumerate(results):
        check_result(index, result)
    document = {"device": device, "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
                "results": list(results)}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
