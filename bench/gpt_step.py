#!/usr/bin/python3
"""examples/gpt's training step against PyTorch's on the same CPU, interleaved (issue 45).

    PYTHON bench/gpt_step.py BUILD/examples/gpt [--rounds 3] [--steps 60] [--threads 2]
                             [--no-subprocess-peers]

PYTHON is any interpreter with PyTorch: Debian's python3-torch (/usr/bin/python3, 1.13: eager
only) or bench/peers/setup.sh's .deps/venv-torch/bin/python (PyTorch 2: eager and
torch.compile). The model is examples/gpt/model.hpp's (vocabulary 128, context 32, width 64,
two pre-norm blocks of causal two-head attention with one qkv layer and a gelu MLP of 256, a
final layer norm, a linear head, the mean cross-entropy, Adam) at batch 32, as
examples/gpt/replay_torch.py writes it, with scaled_dot_product_attention where PyTorch has it.
The same model also races as "JAX jit" (bench/peers/examples_jax.py: one jax.jit'd step,
jax.nn.dot_product_attention) and "TF graph" / "TF XLA" (bench/peers/examples_tf.py: a Keras
model's step in one tf.function, without and with jit_compile=True), each a subprocess run by
the interpreter of setup.sh's .deps/venv-jax or .deps/venv-tf (on the CPU, pinned to --threads
CPUs), when that interpreter exists; --no-subprocess-peers leaves them out. Each round runs
typeflow's program for --steps steps (its step from the examples/sec of the steps after the
first log line), then each PyTorch form and each subprocess peer for as many steps (the median
after its warm-up; torch.compile's, jax.jit's and the tf.functions' first steps compile), with
the same thread count. Prints each round and the median ratio typeflow / peer (below 1:
typeflow is faster), with the CPU."""
import argparse
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from example_step import cpu_name, race, subprocess_peers, subprocess_versions  # noqa: E402
from example_step import typeflow_step  # noqa: E402  (bench/)
from example_step import torch_step as timed_step  # noqa: E402

VOCAB, CONTEXT, WIDTH, HEADS, HIDDEN, BLOCKS, BATCH = 128, 32, 64, 2, 256, 2, 32


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Parameter(torch.randn(CONTEXT, WIDTH) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(BLOCKS):
            self.blocks.append(torch.nn.ModuleDict({
                "ln1": torch.nn.LayerNorm(WIDTH), "qkv": torch.nn.Linear(WIDTH, 3 * WIDTH),
                "proj": torch.nn.Linear(WIDTH, WIDTH), "ln2": torch.nn.LayerNorm(WIDTH),
                "fc": torch.nn.Linear(WIDTH, HIDDEN), "out": torch.nn.Linear(HIDDEN, WIDTH)}))
        self.ln_f = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.register_buffer("causal", torch.ones(CONTEXT, CONTEXT, dtype=torch.bool).tril())

    def attention(self, q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        return torch.softmax(s.masked_fill(~self.causal, float("-inf")), dim=-1) @ v

    def forward(self, tokens, targets):
        b, t = tokens.shape
        h = self.tok(tokens) + self.pos
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](h)).split(WIDTH, dim=-1)
            q, k, v = (z.reshape(b, t, HEADS, WIDTH // HEADS).transpose(1, 2) for z in (q, k, v))
            a = self.attention(q, k, v)
            h = h + blk["proj"](a.transpose(1, 2).reshape(b, t, WIDTH))
            h = h + blk["out"](F.gelu(blk["fc"](blk["ln2"](h))))
        logits = self.head(self.ln_f(h))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def torch_step(steps: int, threads: int, compiled: bool) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Gpt()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    return timed_step(model, opt, (x, y), steps, compiled)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-subprocess-peers", action="store_true",
                    help="leave out JAX jit, TF graph and TF XLA (the PyTorch peers only)")
    args = ap.parse_args()
    forms = {"PyTorch eager": False}
    if hasattr(torch, "compile"):
        forms["torch.compile"] = True
    peers = {name: (lambda c=compiled: torch_step(args.steps, args.threads, c))
             for name, compiled in forms.items()}
    if not args.no_subprocess_peers:
        peers.update(subprocess_peers("gpt", args.steps, args.threads, BATCH))
    print(f"{cpu_name()}, {args.threads} threads, PyTorch {torch.__version__}"
          f"{subprocess_versions(peers)}")
    race(args.rounds, lambda: typeflow_step(args.exe, args.steps, args.threads, BATCH), peers,
         digits=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
