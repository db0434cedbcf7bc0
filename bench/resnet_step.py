#!/usr/bin/python3
"""examples/resnet's training step against PyTorch's on the same CPU, interleaved (issue 46).

    PYTHON bench/resnet_step.py BUILD/examples/resnet [--rounds 3] [--steps 40] [--batch 128]
                                [--threads 2] [--data-dir DIR] [--no-subprocess-peers]

PYTHON is any interpreter with PyTorch: Debian's python3-torch (/usr/bin/python3, 1.13: eager
only) or bench/peers/setup.sh's .deps/venv-torch/bin/python (PyTorch 2: eager and
torch.compile). The model is examples/resnet/model.hpp's (a 3x3 convolution of 16 filters with
batch norm and relu, one basic residual block per stage of 16, 32 and 64 filters, the last two
with stride 2 and a 1x1 shortcut with batch norm, global average pooling, a dense layer of 10,
the mean cross-entropy, Adam) on Fashion-MNIST's 28x28 images, as examples/resnet/
replay_torch.py writes it, in NCHW and in channels-last memory. The same model also races in
NHWC, batch norm in training mode, as "JAX jit" (bench/peers/examples_jax.py: one jax.jit'd
step, lax.conv_general_dilated with SAME padding) and "TF graph" / "TF XLA" (bench/peers/
examples_tf.py: Keras Conv2D(padding="same") and BatchNormalization, the step in one
tf.function, without and with jit_compile=True), each a subprocess run by the interpreter of
bench/peers/setup.sh's .deps/venv-jax or .deps/venv-tf (on the CPU, pinned to --threads CPUs),
when that interpreter exists; --no-subprocess-peers leaves them out. typeflow trains on the
first steps x batch training images (its own input pipeline, random flips included); the peers
on one random batch. Each round runs typeflow's program for --steps steps (its step from the
examples/sec of the steps after the first log line), then each PyTorch form and each
subprocess peer for as many steps (the median after its warm-up; torch.compile's, jax.jit's
and the tf.functions' first steps compile), with the same thread count. Prints each round and
the median ratio typeflow / peer (below 1: typeflow is faster), with the CPU."""
import argparse
import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from example_step import cpu_name, race, subprocess_peers, subprocess_versions  # noqa: E402
from example_step import typeflow_step  # noqa: E402  (bench/)
from example_step import torch_step as timed_step  # noqa: E402


def conv_bn(cin: int, cout: int, k: int, stride: int) -> torch.nn.Sequential:
    # TensorFlow's SAME padding: for these odd kernels and even sizes, (k - 1) // 2 on both sides
    # at stride 1; at stride 2 one less before than after (F.pad in forward)
    conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=0 if stride == 2 else k // 2,
                           bias=False)
    return torch.nn.Sequential(conv, torch.nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))


class Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        self.a = conv_bn(cin, cout, 3, stride)
        self.b = conv_bn(cout, cout, 3, 1)
        self.shortcut = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.a(F.pad(x, (0, 1, 0, 1)) if self.stride == 2 else x)
        y = self.b(F.relu(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(1, 16, 3, 1)
        self.stages = torch.nn.Sequential(Block(16, 16, 1), Block(16, 16, 1), Block(16, 32, 2),
                                          Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1))
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, images, labels):
        h = self.stages(F.relu(self.stem(images)))
        return F.cross_entropy(self.fc(h.mean(dim=(2, 3))), labels)


def torch_step(steps: int, batch: int, threads: int, compiled: bool, channels_last: bool) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet()
    x = torch.rand(batch, 1, 28, 28)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    return timed_step(model, opt, (x, y), steps, compiled)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None, help="resnet's --data-dir (its default if absent)")
    ap.add_argument("--no-subprocess-peers", action="store_true",
                    help="leave out JAX jit, TF graph and TF XLA (the PyTorch peers only)")
    args = ap.parse_args()
    forms = {"PyTorch eager": (False, False), "PyTorch eager, channels-last": (False, True)}
    if hasattr(torch, "compile"):
        forms["torch.compile"] = (True, False)
        forms["torch.compile, channels-last"] = (True, True)
    peers = {name: (lambda f=form: torch_step(args.steps, args.batch, args.threads, *f))
             for name, form in forms.items()}
    if not args.no_subprocess_peers:
        peers.update(subprocess_peers("resnet", args.steps, args.threads, args.batch))
    run_args = ["--epochs", "1", "--train-limit", str(args.steps * args.batch), "--test-limit",
                "100", "--batch-size", str(args.batch)]
    if args.data_dir:
        run_args += ["--data-dir", args.data_dir]
    print(f"{cpu_name()}, {args.threads} threads, batch {args.batch}, PyTorch {torch.__version__}"
          f"{subprocess_versions(peers)}")
    race(args.rounds,
         lambda: typeflow_step(args.exe, args.steps, args.threads, args.batch, run_args), peers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
