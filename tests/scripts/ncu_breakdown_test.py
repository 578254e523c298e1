#!/usr/bin/env python3
"""Tests scripts/ncu_breakdown.py on CSVs written the way `ncu --csv --page raw` writes them,
with fresh random durations: kernel names shortened as the tables need them (an anonymous
namespace however ncu spells it, template arguments dropped, the map kernels' functor kept),
launches grouped by name and shape, the per-step totals, and the SMs' busy share."""
import contextlib
import io
import pathlib
import random
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import ncu_breakdown  # noqa: E402

COLUMNS = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "launch__grid_size", "launch__block_size", "launch__registers_per_thread", "sm__cycles_active.avg",
           "sm__cycles_elapsed.avg"]


def csv_text(launches):
    quote = lambda values: ",".join(f'"{v}"' for v in values)
    units = ["", "", "ns", "byte", "byte", "", "", "register/thread", "cycle", "cycle"]
    return "\n".join(["==PROF== noise before the table", quote(COLUMNS), quote(units)] +
                     [quote([i] + row) for i, row in enumerate(launches)]) + "\n"


class ShortNameTest(unittest.TestCase):
    def test_anonymous_namespaces_and_template_arguments_go(self):
        for spelling in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
            name = f"void ft::cuda::{spelling}attention_backward_hopper_kernel<64, 0>(Params, CUtensorMap_st)"
            self.assertEqual(ncu_breakdown.short_name(name), "attention_backward_hopper_kernel")

    def test_map_kernels_keep_their_functor(self):
        name = ("void ft::cuda::map_reduce_columns_kernel<8, __nv_bfloat16, ft::cuda::<unnamed>::"
                "DropoutBackward<__nv_bfloat16, 8>>(T3, long, long, float *, unsigned int *, GradSink<T2>)")
        self.assertEqual(ncu_breakdown.short_name(name), "map_reduce_columns_kernel::DropoutBackward")
        self.assertEqual(ncu_breakdown.short_name("void ft::cuda::map_kernel<8, Scale<float>>(Scale<float>, long)"),
                         "map_kernel::Scale")

    def test_cublas_names_stay(self):
        name = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
        self.assertEqual(ncu_breakdown.short_name(name), name)


class BreakdownTest(unittest.TestCase):
    def run_breakdown(self, launches, *args):
        out = io.StringIO()
        sys.stdin, saved = io.StringIO(csv_text(launches)), sys.stdin
        sys.argv = ["ncu_breakdown.py", *args]
        try:
            with contextlib.redirect_stdout(out):
                ncu_breakdown.main()
        finally:
            sys.stdin = saved
        return out.getvalue().splitlines()

    def test_groups_totals_and_busy_share(self):
        rng = random.Random()
        steps = rng.randint(2, 4)
        a_ns = [rng.randint(10_000, 90_000) for _ in range(3 * steps)]
        b_ns = [rng.randint(1_000, 9_000) for _ in range(steps)]
        active, elapsed = rng.randint(500, 900), 1000
        launches = [["void ft::cuda::<unnamed>::norm_forward_kernel<__nv_bfloat16, 8>(int)", ns, 2 * ns, ns,
                     "2,048", "256", "62", active, elapsed] for ns in a_ns]
        launches += [["void ft::cuda::sum_partials_kernel<float>(int)", ns, 0, 0, "72", "1,024", "32", "", ""]
                     for ns in b_ns]
        rng.shuffle(launches)
        lines = self.run_breakdown(launches, "--steps", str(steps))
        total_ms = (sum(a_ns) + sum(b_ns)) / 1e6 / steps
        self.assertIn(f"{len(launches)} launches, kernel time summed: {total_ms:.3f} ms per step", lines[0])
        norm = next(l for l in lines if l.endswith("norm_forward_kernel")).split()
        self.assertEqual(float(norm[0]), round(sum(a_ns) / 1e6 / steps, 3))  # ms a step
        self.assertEqual(int(norm[2]), 3)                                    # launches a step
        self.assertEqual(float(norm[4]), 3.0)  # 3 bytes read and written a ns: 3 GB/s
        self.assertAlmostEqual(float(norm[7]), 100.0 * active / elapsed, delta=0.05)  # %sm
        partials = next(l for l in lines if l.endswith("sum_partials_kernel")).split()
        self.assertEqual(partials[7], "-")  # no SM cycles asked for: no share printed
        # Largest group first.
        self.assertLess(lines.index(next(l for l in lines if l.endswith("norm_forward_kernel"))),
                        lines.index(next(l for l in lines if l.endswith("sum_partials_kernel"))))


if __name__ == "__main__":
    unittest.main()
