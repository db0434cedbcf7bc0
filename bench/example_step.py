"""What bench/lstm_step.py, gpt_step.py and resnet_step.py share: the CPU's name, an example
program's steady-state training step, a PyTorch model's, the JAX and TensorFlow peers' (each a
subprocess in its own virtual environment: bench/peers/examples_jax.py, examples_tf.py), and the
interleaved rounds."""
import json
import os
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


REPO = pathlib.Path(__file__).resolve().parent.parent
# the race's name of each subprocess peer: (its framework, as in .deps/venv-FRAMEWORK and
# bench/peers/examples_FRAMEWORK.py, and the script's --mode)
SUBPROCESS_PEERS = {"JAX jit": ("jax", "jit"), "TF graph": ("tf", "graph"), "TF XLA": ("tf", "xla")}
# the installed distributions that name the version (setup.sh installs tensorflow-cpu)
DIST = {"jax": ("jax",), "tf": ("tensorflow_cpu", "tensorflow")}


def peer_python(framework: str) -> pathlib.Path:
    """bench/peers/setup.sh's interpreter for framework (jax or tf): .deps/venv-FRAMEWORK."""
    return REPO / ".deps" / f"venv-{framework}" / "bin" / "python"


def peer_version(framework: str, python=None) -> str:
    """The framework's version in the virtual environment of python (peer_python's by default),
    read from its installed metadata (without starting the interpreter); "?" if not found."""
    venv = pathlib.Path(python or peer_python(framework)).parent.parent
    for dist in DIST[framework]:
        for info in sorted(venv.glob(f"lib/python*/site-packages/{dist}-*.dist-info")):
            return info.name[:-len(".dist-info")].split("-")[-1]
    return "?"


def subprocess_step(framework: str, mode: str, model: str, steps: int, threads: int,
                    batch: int = None, python=None) -> float:
    """Median seconds of a training step of model (gpt, lstm or resnet) in bench/peers/
    examples_FRAMEWORK.py --mode mode, run by python (peer_python(framework) by default) with
    CUDA_VISIBLE_DEVICES="" and JAX_PLATFORMS=cpu: --steps timed steps after its warm-up of 5
    (the first one compiles), the process pinned to `threads` CPUs (intra-op threads too in
    TensorFlow). Exits with the peer's output when it fails (its loss not decreasing included)."""
    cmd = [str(python or peer_python(framework)),
           str(REPO / "bench" / "peers" / f"examples_{framework}.py"), "--model", model,
           "--mode", mode, "--steps", str(steps), "--threads", str(threads)]
    if batch is not None:
        cmd += ["--batch", str(batch)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{pathlib.Path(sys.argv[0]).name}: {' '.join(cmd)} failed (exit "
                 f"{proc.returncode}):\n{proc.stdout}{proc.stderr[-4000:]}")
    return float(json.loads(lines[-1])["step_s"])


def subprocess_peers(model: str, steps: int, threads: int, batch: int = None) -> dict:
    """race()'s peers "JAX jit", "TF graph" and "TF XLA" (subprocess_step) for those whose
    interpreter (peer_python) exists."""
    return {name: (lambda f=framework, m=mode: subprocess_step(f, m, model, steps, threads, batch))
            for name, (framework, mode) in SUBPROCESS_PEERS.items()
            if peer_python(framework).exists()}


def subprocess_versions(peers: dict) -> str:
    """", JAX 0.x, TensorFlow 2.y" for the subprocess peers among peers ("" for none)."""
    frameworks = {SUBPROCESS_PEERS[name][0] for name in peers if name in SUBPROCESS_PEERS}
    return "".join(f", {label} {peer_version(f)}" for f, label in
                   (("jax", "JAX"), ("tf", "TensorFlow")) if f in frameworks)


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
