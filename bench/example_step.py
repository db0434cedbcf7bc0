"""What bench/lstm_step.py, gpt_step.py and resnet_step.py share: the CPU's name, an example
program's steady-state training step, a PyTorch model's, and the interleaved rounds."""
import pathlib
import re
import statistics
import subprocess
import sys
import time


def cpu_name() -> str:
    """The model name, with the family and model numbers (some hosts name only the vendor)."""
    info = {}
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return (f"{info.get('model name', 'an unknown CPU')} (family {info.get('cpu family', '?')} "
            f"model {info.get('model', '?')})")


def typeflow_step(exe: str, steps: int, threads: int, batch: int, run_args=None) -> float:
    """Seconds per step of example program exe (flags like the main job's) over steps 2 ..
    steps-1, from the examples/sec of its second log line (sec/batch is printed to the
    millisecond). run_args: the flags that make it train `steps` steps of `batch` examples
    (the text examples' --steps and --sample 0 when None)."""
    if run_args is None:
        run_args = ["--steps", str(steps), "--sample", "0"]
    out = subprocess.run([exe, *run_args, "--log-every", str(steps - 1), "--threads", str(threads)],
                         capture_output=True, text=True, check=True).stdout
    rates = re.findall(r"step (\d+), loss = \S+ \((\S+) examples/sec; \S+ sec/batch\)", out)
    if len(rates) < 2:
        sys.exit(f"{pathlib.Path(sys.argv[0]).name}: no steady-state rate in {exe}'s output:\n"
                 f"{out}")
    # step 1 alone, then steps 2 .. steps-1 (the steady state), then the last one
    return batch / float(rates[1][1])


def torch_step(model, opt, inputs, steps: int, compiled: bool) -> float:
    """Median seconds of a PyTorch training step (zero_grad, loss = model(*inputs), backward,
    opt.step, loss.item()) over `steps` steps after a warm-up of 5 (10 for torch.compile, whose
    first steps compile)."""
    import torch  # (only the PyTorch races need it)
    run = torch.compile(model) if compiled else model
    warm = 10 if compiled else 5
    times = []
    for i in range(steps + warm):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = run(*inputs)
        loss.backward()
        opt.step()
        loss.item()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def race(rounds: int, ours, peers: dict, digits: int = 1) -> None:
    """Interleaved rounds: ours() (typeflow's seconds per step), then each peer's callable, in
    turn; prints each round and the median ratio typeflow / peer (below 1: typeflow is faster)."""
    ratios = {name: [] for name in peers}
    for r in range(1, rounds + 1):
        t = ours()
        line = f"round {r}: typeflow {t * 1e3:.{digits}f} ms"
        for name, peer_step in peers.items():
            p = peer_step()
            ratios[name].append(t / p)
            line += f", {name} {p * 1e3:.{digits}f} ms (ratio {t / p:.2f})"
        print(line, flush=True)
    for name, rs in ratios.items():
        print(f"median ratio typeflow / {name}: {statistics.median(rs):.2f}")
