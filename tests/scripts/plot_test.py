#!/usr/bin/env python3
"""Tests scripts/plot.py on fresh random metrics and bench results: it writes PNGs of the size it
promises, draws every run and variant it was given, and stops with a message naming the file and
line for each kind of bad input."""
import json
import pathlib
import random
import struct
import subprocess
import sys
import tempfile
import unittest

PLOT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "plot.py"
sys.path.insert(0, str(PLOT.parent))
import plot  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True)


def png_size(path):
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="plot-test-"))
        self.rng = random.Random()  # fresh inputs every run

    def metrics(self, name, steps):
        loss = self.rng.uniform(2.0, 11.0)
        lines, expected = [], []
        for step in range(0, steps, 5):
            loss *= self.rng.uniform(0.9, 1.0)
            lines.append(json.dumps({"step": step, "loss": loss, "lr": 1e-3, "ms": self.rng.uniform(1, 9)}))
            expected.append((step, loss))
            if step % 20 == 0:
                lines.append(json.dumps({"step": step, "eval": {"val loss": loss * 1.1}}))
        path = self.dir / name
        path.write_text("\n".join(lines) + "\n")
        return path, expected

    def bench(self, name, device, results):
        path = self.dir / name
        path.write_text(json.dumps({"device": device, "date": "2026-11-25", "results": results}))
        return path

    def test_loss_curves_read_back_and_draw(self):
        fused, fused_points = self.metrics("fused.jsonl", self.rng.randint(30, 400))
        unfused, _ = self.metrics("unfused.jsonl", self.rng.randint(30, 400))
        steps, losses, eval_steps, _ = plot.read_loss_curve(fused)
        self.assertEqual(list(zip(steps, losses)), fused_points)
        self.assertEqual(eval_steps, [s for s, _ in fused_points if s % 20 == 0])
        out = self.dir / "loss.png"
        result = run("loss", fused, unfused, "-o", out, "--labels", "fused,unfused")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(png_size(out), (840, 504))

    def test_bench_bars_merge_files_and_draw(self):
        device = "NVIDIA H100 80GB HBM3"
        workloads = ["gpt2-124M", "mlp-fmnist", f"op-{self.rng.randint(0, 999)}"]
        ours = [{"workload": w, "variant": v, "ms": self.rng.uniform(0.1, 5000)} for w in workloads
                for v in ("fused", "unfused")]
        peers = [{"workload": w, "variant": "PyTorch eager", "ms": self.rng.uniform(0.1, 5000)} for w in workloads[:2]]
        a, b = self.bench("ours.json", device, ours), self.bench("peers.json", device, peers)
        _, table = plot.read_bench([a, b])
        self.assertEqual(list(table), workloads)
        self.assertEqual(table[workloads[0]]["PyTorch eager"], peers[0]["ms"])
        self.assertNotIn("PyTorch eager", table[workloads[2]])
        out = self.dir / "bench.png"
        result = run("bench", a, b, "-o", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        width, height = png_size(out)
        self.assertEqual(height, 540)
        self.assertGreaterEqual(width, 720)

    def test_bench_renames_and_selects(self):
        device = "NVIDIA H100 80GB HBM3"
        ms = {(w, v): self.rng.uniform(0.1, 500) for w in ("gpt2-124M", "adamw-gpt2", "mlp-fmnist")
              for v in ("fused", "unfused")}
        ms[("gpt2-124M", "torch eager naive foreach")] = self.rng.uniform(0.1, 500)
        ms[("adamw-gpt2", "torch for-loop")] = self.rng.uniform(0.1, 500)
        ms[("adamw-gpt2", "torch fused")] = self.rng.uniform(0.1, 500)
        path = self.bench("all.json", device, [{"workload": w, "variant": v, "ms": x} for (w, v), x in ms.items()])
        renames = plot.parse_renames("torch eager naive foreach=PyTorch eager, torch for-loop=PyTorch eager,"
                                     "adamw-gpt2:torch fused=fastest,cross-entropy V=50304:torch eager=x")
        self.assertEqual(renames[("adamw-gpt2", "torch fused")], "fastest")
        self.assertEqual(renames[("cross-entropy V=50304", "torch eager")], "x")
        _, table = plot.read_bench([path])
        picked = plot.select(table, renames, ["fused", "PyTorch eager"], ["adamw-gpt2", "gpt2-124M"])
        self.assertEqual(list(picked), ["adamw-gpt2", "gpt2-124M"])
        self.assertEqual(picked["adamw-gpt2"], {"fused": ms[("adamw-gpt2", "fused")],
                                                "PyTorch eager": ms[("adamw-gpt2", "torch for-loop")]})
        self.assertEqual(picked["gpt2-124M"]["PyTorch eager"], ms[("gpt2-124M", "torch eager naive foreach")])
        scoped = plot.select(table, renames, ["fastest", "torch fused"], None)
        self.assertEqual(scoped["adamw-gpt2"], {"fastest": ms[("adamw-gpt2", "torch fused")]})
        out = self.dir / "picked.png"
        result = run("bench", path, "-o", out, "--rename", "torch eager naive foreach=PyTorch eager",
                     "--variants", "fused,unfused,PyTorch eager", "--workloads", "gpt2-124M,mlp-fmnist",
                     "--title", "three bars")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(png_size(out)[1], 540)
        self.expect_error(["bench", path, "--rename", "torch for-loop=x,torch fused=x"], "adamw-gpt2", "two variants")
        self.expect_error(["bench", path, "--rename", "nonsense"], "not OLD=NEW")
        self.expect_error(["bench", path, "--rename", ":torch fused=x"], "not OLD=NEW")
        self.expect_error(["bench", path, "--workloads", "gpt2-124M,dlrm-kaggle"], "dlrm-kaggle")

    def expect_error(self, args, *words):
        result = run(*args, "-o", self.dir / "never.png")
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        for word in words:
            self.assertIn(word, result.stderr)
        self.assertFalse((self.dir / "never.png").exists())

    def test_bad_inputs_name_the_file_and_line(self):
        good, _ = self.metrics("good.jsonl", 50)
        broken = self.dir / "broken.jsonl"
        broken.write_text(good.read_text() + '{"step": 99, "loss": \n')
        lines = len(good.read_text().splitlines()) + 1
        self.expect_error(["loss", broken], f"broken.jsonl:{lines}", "not JSON")
        no_loss = self.dir / "no_loss.jsonl"
        no_loss.write_text(json.dumps({"step": 1, "eval": {"val loss": 2.0}}) + "\n")
        self.expect_error(["loss", no_loss], "no_loss.jsonl", "no line has a \"loss\"")
        self.expect_error(["loss", self.dir / "missing.jsonl"], "missing.jsonl", "cannot read")
        self.expect_error(["loss", good, "--labels", "a,b"], "--labels names 2 runs")
        negative = self.bench("neg.json", "gpu", [{"workload": "w", "variant": "fused", "ms": -self.rng.random()}])
        self.expect_error(["bench", negative], "neg.json: results[0]", "positive")
        nameless = self.bench("nameless.json", "gpu", [{"variant": "fused", "ms": 1.0}])
        self.expect_error(["bench", nameless], "results[0]", "workload")
        other = self.bench("other.json", "another gpu", [{"workload": "w", "variant": "fused", "ms": 1.0}])
        mine = self.bench("mine.json", "gpu", [{"workload": "w", "variant": "unfused", "ms": 2.0}])
        self.expect_error(["bench", mine, other], "other.json", "not comparable")


if __name__ == "__main__":
    unittest.main()
