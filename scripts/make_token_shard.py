#!/usr/bin/env python3
"""Writes a synthetic llm.c token shard (256 x int32 header: magic 20240520, version 1, token
count; then uint16 tokens drawn uniformly below --vocab), for timing ft-gpt2 on a machine that
has no dataset. The tokens are random, so the loss it trains to means nothing."""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("path")
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, a.tokens)
    tokens = np.random.default_rng(a.seed).integers(0, a.vocab, size=a.tokens, dtype=np.uint16)
    with open(a.path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
