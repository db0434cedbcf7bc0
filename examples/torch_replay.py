"""What the examples' PyTorch replays share (examples/gpt, lstm and resnet's replay_torch.py):
reading typeflow's safetensors checkpoint, TensorFlow's Adam as typeflow writes it
(nn/optimizers.hpp), the table of losses against float64 and float32, and the verdict of the
character-level examples.
Imported by path: each script puts examples/ on sys.path.
"""
import json
import pathlib
import struct

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path: pathlib.Path) -> dict:
    """Every tensor of a safetensors file, by name, as numpy arrays."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]])
        out[name] = data.reshape(info["shape"]).copy()
    return out


class TfAdam:
    """TensorFlow's Adam (b1 0.9, b2 0.999, eps 1e-8): with t the step (from 1),
    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, and
    p -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)."""

    def __init__(self, params: dict):
        self.p = params
        self.m = {n: torch.zeros_like(t) for n, t in params.items()}
        self.v = {n: torch.zeros_like(t) for n, t in params.items()}

    def step(self, names: list, grads, lr: float, step: int):
        b1, b2, eps = 0.9, 0.999, 1e-8
        with torch.no_grad():
            dtype = next(iter(self.p.values())).dtype
            t = torch.tensor(float(step), dtype=dtype)
            rate = lr * torch.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            for n, g in zip(names, grads):
                self.m[n].mul_(b1).add_(g * (1 - b1))
                self.v[n].mul_(b2).add_(g * g * (1 - b2))
                self.p[n].sub_(rate * self.m[n] / (torch.sqrt(self.v[n]) + eps))


def loss_table(ours: list, ref: list, f32: list):
    """Prints the losses of steps 1-5 and every 10th, typeflow's against PyTorch float64 and
    float32; returns |typeflow - float64| and |float32 - float64| per step."""
    err = [abs(a - r) for a, r in zip(ours, ref)]
    drift = [abs(a - r) for a, r in zip(f32, ref)]
    print("| step | typeflow | PyTorch float64 | PyTorch float32 | typeflow - f64 | f32 - f64 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i in range(len(ref)):
        if i < 5 or i % 10 == 9:
            print(f"| {i + 1} | {ours[i]:.7f} | {ref[i]:.7f} | {f32[i]:.7f} | {err[i]:.2e} "
                  f"| {drift[i]:.2e} |")
    return err, drift


def verdict(ours: list, ref: list, f32: list, most: float = 1e-3) -> int:
    """The loss table, then whether typeflow's losses are within float32 noise of the float64
    replay: the largest difference at most 4 times PyTorch float32's own largest drift, and at
    most `most`. Prints the ratio; returns the exit status (0 agrees, 1 does not)."""
    err, drift = loss_table(ours, ref, f32)
    worst, noise = max(err), max(drift)
    ok = worst <= 4 * noise and worst <= most
    print(f"largest |typeflow - float64| {worst:.3e}; largest |float32 - float64| {noise:.3e}; "
          f"ratio {worst / noise if noise else float('inf'):.2f} (at most 4): "
          f"{'agrees' if ok else 'DOES NOT AGREE'}")
    return 0 if ok else 1


def replay_text(initial: dict, batches, lr: float, dtype: torch.dtype, loss_fn) -> list:
    """The losses of len(batches) steps of TF-style Adam on a character-level model:
    loss_fn(p, tokens, targets) with p the trainable variables by typeflow's name (float, not
    the Adam slots or the learning rate), in `dtype`, from the checkpoint `initial`."""
    trainable = [n for n in initial
                 if not n.endswith(("/adam_m", "/adam_v")) and initial[n].dtype.kind == "f"
                 and n != "learning_rate"]
    p = {n: torch.tensor(initial[n], dtype=dtype, requires_grad=True) for n in trainable}
    adam = TfAdam(p)
    losses = []
    for step, (x, y) in enumerate(batches, start=1):
        loss = loss_fn(p, torch.from_numpy(x).long(), torch.from_numpy(y).long())
        grads = torch.autograd.grad(loss, [p[n] for n in trainable])
        losses.append(loss.item())
        adam.step(trainable, grads, lr, step)
    return losses
