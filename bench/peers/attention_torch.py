#!/usr/bin/python3
"""PyTorch's causal attention at bench/transformer.cpp's shapes (q, k, v [1, 8, T, 64], float32),
forward and forward + backward, for the comparison in bench/README.md: torch's
scaled_dot_product_attention where it exists (PyTorch >= 2.0), else the written-out
softmax(q k^T / 8 + mask) v (Debian 12's PyTorch 1.13). Median of --runs timed calls after
warm-up, on --threads threads.

Usage: /usr/bin/python3 bench/peers/attention_torch.py [--threads 2] [--runs 20] [T ...]
"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("t", type=int, nargs="*", default=[64, 512, 1024])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)

    def attention(q, k, v):
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        t = q.shape[-2]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return torch.softmax(q @ k.transpose(-1, -2) / 8.0 + mask, dim=-1) @ v

    for t in a.t:
        g = torch.Generator().manual_seed(t)
        q, k, v, u = (torch.rand(1, 8, t, 64, generator=g) * 2 - 1 for _ in range(4))
        for mode in ("fwd", "fwd_bwd"):
            times = []
            for i in range(a.runs + 3):
                qq, kk, vv = (x.clone().requires_grad_(mode == "fwd_bwd") for x in (q, k, v))
                start = time.perf_counter()
                if mode == "fwd":
                    with torch.no_grad():
                        attention(qq, kk, vv)
                else:
                    (attention(qq, kk, vv) * u).sum().backward()
                if i >= 3:
                    times.append(time.perf_counter() - start)
            print(json.dumps({"peer": "torch " + torch.__version__,
                              "form": "sdpa" if sdpa is not None else "written out",
                              "T": t, "mode": mode, "median_ms": 1e3 * statistics.median(times)}))


if __name__ == "__main__":
    main()
