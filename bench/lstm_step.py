#!/usr/bin/python3
"""examples/lstm's training step against PyTorch eager's on the same CPU, interleaved.

    /usr/bin/python3 bench/lstm_step.py BUILD/examples/lstm [--rounds 3] [--steps 40]
                                        [--threads 2]

The model is examples/lstm/model.hpp's (vocab 128, embedding 32, one LSTM of 256 units over
64 steps, a linear head, the mean cross-entropy, Adam) at batch 32; PyTorch's is nn.Embedding,
nn.LSTM(batch_first), nn.Linear and torch.optim.Adam. Each round runs typeflow's program for
--steps steps (its step from the examples/sec of the steps after the first log line) and
then PyTorch's for as many steps (the median after 5 warm-up steps), with the same thread
count. Prints each round and the median ratio typeflow / PyTorch (below 1: typeflow is
faster), with the CPU it ran on. Needs Debian's python3-torch (/usr/bin/python3)."""
import argparse
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from example_step import cpu_name, typeflow_step  # noqa: E402  (bench/)


def torch_step(steps: int, threads: int) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(128, 32)
    lstm = torch.nn.LSTM(32, 256, batch_first=True)
    head = torch.nn.Linear(256, 128)
    params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=3e-3)
    x = torch.randint(0, 128, (32, 64))
    y = torch.randint(0, 128, (32, 64))
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        h, _ = lstm(emb(x))
        loss = torch.nn.functional.cross_entropy(head(h).reshape(-1, 128), y.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(f"{cpu_name()}, {args.threads} threads, PyTorch {torch.__version__}")
    ratios = []
    for r in range(1, args.rounds + 1):
        ours = typeflow_step(args.exe, args.steps, args.threads, 32)
        peer = torch_step(args.steps, args.threads)
        ratios.append(ours / peer)
        print(f"round {r}: typeflow {ours * 1e3:.1f} ms, PyTorch eager {peer * 1e3:.1f} ms, "
              f"ratio {ours / peer:.2f}")
    print(f"median ratio typeflow / PyTorch eager: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
