#!/usr/bin/env python3
"""Tests bench/peers/results.py, the PyTorch peers' --json writer, without torch or a GPU: fresh
random results written by write_results read back through scripts/plot.py's read_bench as they
were written, dated today (UTC), and each kind of bad result refused with a ValueError naming it,
leaving no file behind."""
import datetime
import json
import pathlib
import random
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "peers"))
sys.path.insert(0, str(ROOT / "scripts"))
import plot  # noqa: E402
import results  # noqa: E402


class PeerResultsTest(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="peer-results-test-"))
        self.rng = random.Random()  # fresh inputs every run

    def random_results(self):
        out = []
        for w in range(self.rng.randint(1, 6)):
            for variant in self.rng.sample(["torch eager", "torch compile", "torch eager naive foreach",
                                            "torch graph", "torch for-loop"], self.rng.randint(1, 3)):
                result = {"workload": f"workload-{w} B{self.rng.randint(1, 64)}", "variant": variant,
                          "ms": self.rng.uniform(1e-3, 5000)}
                if self.rng.random() < 0.5:
                    result["peak_gb"] = self.rng.uniform(0, 80)
                    result["tok_per_s"] = self.rng.randint(1, 10**6)
                out.append(result)
        return out

    def test_round_trip_through_plot(self):
        device = f"Fake GPU {self.rng.randint(0, 999)} 80GB"
        written = self.random_results()
        path = self.dir / "peer.json"
        results.write_results(path, device, written)
        read_device, table = plot.read_bench([path])
        self.assertEqual(read_device, device)
        expected = {}
        for r in written:
            expected.setdefault(r["workload"], {})[r["variant"]] = r["ms"]
        self.assertEqual(table, expected)
        self.assertEqual(list(table), list(expected))  # first-seen order kept
        document = json.loads(path.read_text())
        self.assertEqual(document["results"], written)  # the extras too
        self.assertEqual(document["date"], datetime.datetime.now(datetime.timezone.utc).date().isoformat())
        self.assertFalse(pathlib.Path(f"{path}.tmp").exists())

    def test_rewrite_replaces_the_file(self):
        path = self.dir / "peer.json"
        results.write_results(path, "gpu", self.random_results())
        again = [{"workload": "w", "variant": "torch eager", "ms": self.rng.uniform(0.1, 9)}]
        results.write_results(path, "gpu", again)
        self.assertEqual(plot.read_bench([path])[1], {"w": {"torch eager": again[0]["ms"]}})

    def test_bad_results_name_the_entry(self):
        good = {"workload": "gpt2-124M", "variant": "torch eager", "ms": 12.5}
        bad_entries = [
            ({"workload": "gpt2-124M", "ms": 12.5}, '"variant"'),
            ({"workload": "gpt2-124M", "variant": "", "ms": 12.5}, '"variant"'),
            ({"variant": "torch eager", "ms": 12.5}, '"workload"'),
            (dict(good, ms=0.0), '"ms"'),
            (dict(good, ms=-self.rng.uniform(0.1, 100)), '"ms"'),
            (dict(good, ms="12.5"), '"ms"'),
            (dict(good, ms=None), '"ms"'),
            (dict(good, ms=True), '"ms"'),
            (dict(good, ms=float("nan")), '"ms"'),
            (dict(good, peak_gb=float("inf")), '"peak_gb"'),
            (dict(good, tok_per_s="fast"), '"tok_per_s"'),
            ("gpt2-124M 12.5 ms", "not a dict"),
        ]
        for bad, word in bad_entries:
            index = self.rng.randint(0, 3)
            entries = [dict(good) for _ in range(4)]
            entries.insert(index, bad)
            path = self.dir / f"bad-{self.rng.randint(0, 10**9)}.json"
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as caught:
                    results.write_results(path, "gpu", entries)
                message = str(caught.exception)
                self.assertIn(f"results[{index}] {bad!r}", message)
                self.assertIn(word, message)
                self.assertFalse(path.exists())
                self.assertFalse(pathlib.Path(f"{path}.tmp").exists())
        with self.assertRaises(ValueError):
            results.write_results(self.dir / "nameless.json", "", [good])


if __name__ == "__main__":
    unittest.main()
