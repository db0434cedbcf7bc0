"""The seed model's training step in PyTorch 2 on the CPU, eager or torch.compile'd: zero_grad,
forward, loss (cross-entropy + weight decay), backward, SGD(momentum 0.9, nesterov) step.
The model is bench/torch_baselines.py's SeedModel; both memory formats (contiguous and
channels_last) are timed and the faster is reported. Prints one JSON line (common.emit), or
serves bench/run's race with the faster (--serve)."""
import os
import sys

import common

args = common.parse_args(["eager", "compile"])
common.pin_cpus(args.threads)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch  # noqa: E402
from torch_baselines import SeedModel  # noqa: E402

torch.set_num_threads(args.threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)
images, labels = common.batch()
images = torch.tensor(images).reshape(common.BATCH, 28, 28, 1).permute(0, 3, 1, 2)
labels = torch.tensor(labels)


def make_step(fmt):
    net = SeedModel(fmt == torch.channels_last)
    x = images.contiguous(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=common.LR, momentum=common.MOMENTUM, nesterov=True)
    loss_fn, opt_step = net.loss, opt.step
    if args.mode == "compile":
        loss_fn, opt_step = torch.compile(net.loss), torch.compile(opt.step)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, labels)
        loss.backward()
        opt_step()
        return loss.item()
    return step


results = {}
for name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
    step = make_step(fmt)
    check = common.sanity(step)
    # Serving the race, 10 steps pick the layout: the race itself does the timing.
    results[name] = (common.measure(step, args.warmup, 10 if args.serve else args.steps), check,
                     step)
best = min(results, key=lambda k: sorted(results[k][0])[len(results[k][0]) // 2])
times, check, step = results[best]
extra = {"threads": torch.get_num_threads(), "layout": best}
if args.serve:  # the race runs the faster layout only
    common.serve(step, 0, f"torch-{args.mode}", torch.__version__, check, **extra)
else:
    common.emit(f"torch-{args.mode}", torch.__version__, times, check, **extra)
