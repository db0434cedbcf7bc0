#!/usr/bin/python3
"""Replays examples/gpt's training in PyTorch and compares the losses (issue 45, item 4).

    gpt --steps 50 --replay DIR [other flags]
    /usr/bin/python3 examples/gpt/replay_torch.py DIR [--steps 50] [--heads 2]

gpt --replay DIR writes the variables before step 1 (DIR/initial.safetensors, typeflow's
checkpoint), every step's batch (DIR/batches.bin: int32 [steps, 2, batch, context], the tokens
and the targets) and every step's loss (DIR/losses.txt). This script builds the same model in
PyTorch (model.hpp: token and position embeddings, pre-norm blocks of causal multi-head attention
with one qkv layer and a gelu MLP, a final layer norm, a linear head, the mean cross-entropy),
loads those weights, and trains it on those batches with TensorFlow's Adam as typeflow writes it
(nn/optimizers.hpp), twice: in float64 (the reference) and in float32 (float32's own drift from
it). It passes when typeflow's losses are within float32 noise of the float64 replay: the
largest difference over the steps at most 4 times PyTorch float32's largest drift from float64
(and never more than 1e-3), the judgement used for the seed model's comparison with TensorFlow.
Exit status 0 when it agrees, 1 when it does not, 2 on unusable input.

Needs Debian's python3-torch and python3-numpy (/usr/bin/python3); the model's head count is not
in the checkpoint, so --heads must match model.hpp (2).
"""
import argparse
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from torch_replay import read_safetensors, replay_text, verdict  # noqa: E402  (examples/)

def model_loss(p: dict, tokens: torch.Tensor, targets: torch.Tensor, blocks: int,
               heads: int) -> torch.Tensor:
    """model.hpp's loss for one batch, with the variables in p (by typeflow's names)."""
    b, t = tokens.shape
    h = p["tok/embeddings"][tokens] + p["pos/embeddings"]
    d = h.shape[-1]
    dh = d // heads

    def ln(x, name):
        return F.layer_norm(x, (d,), p[name + "/gamma"], p[name + "/beta"], eps=1e-5)

    def dense(x, name):
        return x @ p[name + "/weights"] + p[name + "/biases"]

    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(blocks):
        name = f"block{i}"
        q, k, v = dense(ln(h, name + "/ln1"), name + "/attn/qkv").split(d, dim=-1)
        q, k, v = (z.reshape(b, t, heads, dh).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / dh ** 0.5
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ v
        h = h + dense(a.transpose(1, 2).reshape(b, t, d), name + "/attn/proj")
        m = F.gelu(dense(ln(h, name + "/ln2"), name + "/fc"))
        h = h + dense(m, name + "/out")
    logits = dense(ln(h, "ln_f"), "head")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def replay(initial: dict, batches: np.ndarray, blocks: int, heads: int, lr: float,
           dtype: torch.dtype) -> list:
    """The losses of len(batches) steps of TF-style Adam (b1 0.9, b2 0.999, eps 1e-8)."""
    return replay_text(initial, batches, lr, dtype,
                       lambda p, x, y: model_loss(p, x, y, blocks, heads))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--learning-rate", type=float, default=None,
                    help="when the checkpoint has no learning_rate")
    args = ap.parse_args()
    torch.set_num_threads(1)  # CTest runs it beside other tests: no spinning threads

    initial = read_safetensors(args.dir / "initial.safetensors")
    ours = [float(line) for line in (args.dir / "losses.txt").read_text().split()]
    context = initial["pos/embeddings"].shape[0]
    raw = np.fromfile(args.dir / "batches.bin", dtype="<i4")
    per_step = raw.size // len(ours) if ours else 0
    if not ours or raw.size != per_step * len(ours) or per_step % (2 * context):
        print(f"replay_torch: {args.dir}: batches.bin does not hold {len(ours)} steps of "
              f"[2, batch, {context}]", file=sys.stderr)
        return 2
    steps = min(args.steps, len(ours))
    batches = raw.reshape(len(ours), 2, -1, context)[:steps]
    blocks = sum(1 for n in initial if n.startswith("block") and n.endswith("/ln1/gamma"))
    lr = (float(initial["learning_rate"]) if "learning_rate" in initial else args.learning_rate)
    if lr is None:
        print("replay_torch: no learning_rate in the checkpoint; pass --learning-rate",
              file=sys.stderr)
        return 2

    ref = replay(initial, batches, blocks, args.heads, lr, torch.float64)
    f32 = replay(initial, batches, blocks, args.heads, lr, torch.float32)
    print(f"{steps} steps, batch {batches.shape[2]}, {blocks} blocks, learning rate {lr:g}")
    return verdict(ours, ref, f32)


if __name__ == "__main__":
    sys.exit(main())
