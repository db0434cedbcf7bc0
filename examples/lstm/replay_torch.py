#!/usr/bin/python3
"""Replays examples/lstm's training in PyTorch and compares the losses (issue 46, item 4).

    lstm --steps 50 --replay DIR [other flags]
    /usr/bin/python3 examples/lstm/replay_torch.py DIR [--steps 50]

lstm --replay DIR writes the variables before step 1 (DIR/initial.safetensors, typeflow's
checkpoint), every step's batch (DIR/batches.bin: int32 [steps, 2, batch, context], the tokens
and the targets) and every step's loss (DIR/losses.txt). This script builds the same model in
PyTorch (model.hpp: a token embedding, one LSTM layer from a zero state, a linear head, the mean
cross-entropy), with nn.LSTM's parameters: typeflow's `lstm/weights` [E + U, 4U] are nn.LSTM's
weight_ih and weight_hh transposed (the same gate order i, f, g, o), `lstm/biases` its bias_ih,
and bias_hh holds the forget bias (1.0) on the f gate, held constant. The loop over the steps is
written out (autograd does not reach the weights of an nn.LSTM called with others), and checked
first against nn.LSTM itself on the first batch (within 1e-12 in float64). It loads those weights and
trains on those batches with TensorFlow's Adam as typeflow writes it (nn/optimizers.hpp), twice:
in float64 (the reference) and in float32 (float32's own drift from it). It passes when
typeflow's losses are within float32 noise of the float64 replay: the largest difference over
the steps at most 4 times PyTorch float32's largest drift from float64 (and never more than
1e-3). Exit status 0 when it agrees, 1 when it does not, 2 on unusable input.

Needs Debian's python3-torch and python3-numpy (/usr/bin/python3); the context length and the
forget bias are not in the checkpoint, so --context and --forget-bias must match model.hpp (64
and 1.0).
"""
import argparse
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from torch_replay import read_safetensors, replay_text, verdict  # noqa: E402  (examples/)

def split_lstm(p: dict, forget_bias: float):
    """typeflow's `lstm/weights` and `lstm/biases` as nn.LSTM's four parameters."""
    w, b = p["lstm/weights"], p["lstm/biases"]
    e = p["tok/embeddings"].shape[1]
    u = w.shape[1] // 4
    bias_hh = torch.zeros_like(b)
    bias_hh[u:2 * u] = forget_bias
    return w[:e].t(), w[e:].t(), b, bias_hh


def lstm_forward(x: torch.Tensor, w_ih, w_hh, b_ih, b_hh) -> torch.Tensor:
    """nn.LSTM's forward (gates i, f, g, o) over x [B, T, E] from zeros: h [B, T, U]. Written
    out so that autograd reaches the weights (nn.LSTM keeps its own flat copy of them);
    check_against_nn_lstm shows it equals nn.LSTM."""
    bsz, steps, _ = x.shape
    u = w_hh.shape[1]
    h = x.new_zeros(bsz, u)
    c = x.new_zeros(bsz, u)
    out = []
    for t in range(steps):
        z = x[:, t] @ w_ih.t() + b_ih + h @ w_hh.t() + b_hh
        i, f, g, o = z.split(u, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out, dim=1)


def check_against_nn_lstm(p: dict, tokens: torch.Tensor, forget_bias: float) -> float:
    """The largest difference between lstm_forward and nn.LSTM on the first batch, float64."""
    with torch.no_grad():
        w_ih, w_hh, b_ih, b_hh = split_lstm(p, forget_bias)
        lstm = torch.nn.LSTM(w_ih.shape[1], w_hh.shape[1], batch_first=True).double()
        lstm.weight_ih_l0.copy_(w_ih)
        lstm.weight_hh_l0.copy_(w_hh)
        lstm.bias_ih_l0.copy_(b_ih)
        lstm.bias_hh_l0.copy_(b_hh)
        x = p["tok/embeddings"][tokens]
        return (lstm(x)[0] - lstm_forward(x, w_ih, w_hh, b_ih, b_hh)).abs().max().item()


def model_loss(p: dict, tokens: torch.Tensor, targets: torch.Tensor,
               forget_bias: float) -> torch.Tensor:
    """model.hpp's loss for one batch, with the variables in p (by typeflow's names)."""
    h = lstm_forward(p["tok/embeddings"][tokens], *split_lstm(p, forget_bias))
    logits = h @ p["head/weights"] + p["head/biases"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def replay(initial: dict, batches: np.ndarray, lr: float, forget_bias: float,
           dtype: torch.dtype) -> list:
    """The losses of len(batches) steps of TF-style Adam (b1 0.9, b2 0.999, eps 1e-8)."""
    return replay_text(initial, batches, lr, dtype,
                       lambda p, x, y: model_loss(p, x, y, forget_bias))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--forget-bias", type=float, default=1.0, help="model.hpp's (ty::lstm's)")
    ap.add_argument("--context", type=int, default=64, help="model.hpp's (not in the checkpoint)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # CTest runs it beside other tests: no spinning threads

    initial = read_safetensors(args.dir / "initial.safetensors")
    ours = [float(line) for line in (args.dir / "losses.txt").read_text().split()]
    raw = np.fromfile(args.dir / "batches.bin", dtype="<i4")
    needed = ("tok/embeddings", "lstm/weights", "lstm/biases", "head/weights", "learning_rate")
    missing = [n for n in needed if n not in initial]
    if missing or not ours or raw.size % (2 * len(ours)):
        print(f"replay_torch: {args.dir}: not an lstm --replay directory (missing "
              f"{missing or 'whole steps of batches'})", file=sys.stderr)
        return 2
    steps = min(args.steps, len(ours))
    per_step = raw.size // len(ours) // 2  # batch * context
    context = args.context
    batch = per_step // context
    if per_step % context:
        print(f"replay_torch: {args.dir}: batches.bin does not hold [2, batch, {context}] per "
              f"step", file=sys.stderr)
        return 2
    batches = raw.reshape(len(ours), 2, batch, context)[:steps]
    lr = float(initial["learning_rate"])

    p64 = {n: torch.tensor(v, dtype=torch.float64) for n, v in initial.items()}
    gap = check_against_nn_lstm(p64, torch.from_numpy(batches[0, 0]).long(), args.forget_bias)
    if gap > 1e-12:
        print(f"replay_torch: the written-out LSTM differs from nn.LSTM by {gap:.3e}",
              file=sys.stderr)
        return 1
    print(f"the written-out LSTM equals nn.LSTM within {gap:.1e} (float64, first batch)")
    ref = replay(initial, batches, lr, args.forget_bias, torch.float64)
    f32 = replay(initial, batches, lr, args.forget_bias, torch.float32)
    print(f"{steps} steps, batch {batch}, context {context}, learning rate {lr:g}")
    return verdict(ours, ref, f32)


if __name__ == "__main__":
    sys.exit(main())
