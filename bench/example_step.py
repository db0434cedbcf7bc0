"""What bench/lstm_step.py, gpt_step.py and resnet_step.py share: the CPU's name and an example
program's steady-state training step."""
import pathlib
import re
import subprocess
import sys


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
