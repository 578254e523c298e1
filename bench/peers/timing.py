"""The peers' step timer: untimed warm-up steps, then each timed step between two CUDA events
(wall clock on the CPU), so every peer reports its median the same way. Imported as `timing` from
this folder (a script's own folder is on sys.path however it is started)."""
import statistics
import time

import torch


def time_steps(step, warmup, steps, device="cuda", reset_peak_memory=False):
    """Runs `step()` `warmup` times untimed, then `steps` times timed; returns (ms of each timed
    step, what the last step returned). On CUDA the events are read only after one synchronize at
    the end, so the host keeps queueing steps as the training loop would; on the CPU the steps run
    synchronously and perf_counter suffices. reset_peak_memory (CUDA only) starts the peak-memory
    count after the warm-up, so it leaves out what torch.compile and the first steps allocate."""
    for _ in range(warmup):
        step()
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        if reset_peak_memory:
            torch.cuda.reset_peak_memory_stats()
    times, out = [], None
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = step()
            end.record()
            times.append((start, end))
        else:
            t0 = time.perf_counter()
            out = step()
            times.append((time.perf_counter() - t0) * 1e3)
    if cuda:
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in times]
    return times, out


def median_ms(step, warmup, steps, device="cuda"):
    """The median of time_steps' per-step ms, for peers that need no more than that."""
    return statistics.median(time_steps(step, warmup, steps, device)[0])
