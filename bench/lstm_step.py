#!/usr/bin/python3
"""examples/lstm's training step against PyTorch's on the same CPU, interleaved.

    PYTHON bench/lstm_step.py BUILD/examples/lstm [--rounds 3] [--steps 40] [--threads 2]
                              [--no-subprocess-peers]

PYTHON is any interpreter with PyTorch: Debian's python3-torch (/usr/bin/python3, 1.13: eager
only) or bench/peers/setup.sh's .deps/venv-torch/bin/python (PyTorch 2: eager and
torch.compile). The model is examples/lstm/model.hpp's (vocab 128, embedding 32, one LSTM of
256 units over 64 steps, a linear head, the mean cross-entropy, Adam) at batch 32; PyTorch's is
nn.Embedding, nn.LSTM(batch_first), nn.Linear and torch.optim.Adam. The same model also races
as "JAX jit" (bench/peers/examples_jax.py: one jax.jit'd step, the LSTM a lax.scan over the 64
steps) and "TF graph" / "TF XLA" (bench/peers/examples_tf.py: Keras Embedding, LSTM and Dense,
the step in one tf.function, without and with jit_compile=True), each a subprocess run by the
interpreter of setup.sh's .deps/venv-jax or .deps/venv-tf (on the CPU, pinned to --threads
CPUs), when that interpreter exists; --no-subprocess-peers leaves them out. Each round runs
typeflow's program for --steps steps (its step from the examples/sec of the steps after the
first log line), then each PyTorch form and each subprocess peer for as many steps (the median
after its warm-up; torch.compile's, jax.jit's and the tf.functions' first steps compile), with
the same thread count. "eager, no oneDNN" is PyTorch eager with torch.backends.mkldnn disabled:
nn.LSTM's cell op by op, as typeflow's scan runs it, instead of oneDNN's fused LSTM primitive.
Run it without OMP_WAIT_POLICY=PASSIVE: PyTorch's OpenMP threads would then sleep between its
many small per-step regions (its eager step took 1.7x as long so on an AMD Zen 3; typeflow's
own pool does not read the variable). Prints each round and the median ratio typeflow / peer (below 1:
typeflow is faster), with the CPU it ran on."""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from example_step import cpu_name, race, subprocess_peers, subprocess_versions  # noqa: E402
from example_step import typeflow_step  # noqa: E402  (bench/)
from example_step import torch_step as timed_step  # noqa: E402


class CharLstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(128, 32)
        self.lstm = torch.nn.LSTM(32, 256, batch_first=True)
        self.head = torch.nn.Linear(256, 128)

    def forward(self, x, y):
        h, _ = self.lstm(self.emb(x))
        return torch.nn.functional.cross_entropy(self.head(h).reshape(-1, 128), y.reshape(-1))


def torch_step(steps: int, threads: int, compiled: bool, onednn: bool = True) -> float:
    """onednn=False: with torch.backends.mkldnn disabled, nn.LSTM runs its cell op by op instead
    of as oneDNN's fused LSTM primitive (what PyTorch 2 picks on the CPU for float32)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = CharLstm()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.randint(0, 128, (32, 64))
    y = torch.randint(0, 128, (32, 64))
    with torch.backends.mkldnn.flags(enabled=onednn):
        return timed_step(model, opt, (x, y), steps, compiled)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-subprocess-peers", action="store_true",
                    help="leave out JAX jit, TF graph and TF XLA (the PyTorch peers only)")
    args = ap.parse_args()
    forms = {"PyTorch eager": False}
    if hasattr(torch, "compile"):
        forms["torch.compile"] = True
    peers = {name: (lambda c=compiled: torch_step(args.steps, args.threads, c))
             for name, compiled in forms.items()}
    peers["eager, no oneDNN"] = lambda: torch_step(args.steps, args.threads, False, onednn=False)
    if not args.no_subprocess_peers:
        peers.update(subprocess_peers("lstm", args.steps, args.threads, 32))
    print(f"{cpu_name()}, {args.threads} threads, PyTorch {torch.__version__}"
          f"{subprocess_versions(peers)}")
    race(args.rounds, lambda: typeflow_step(args.exe, args.steps, args.threads, 32), peers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
