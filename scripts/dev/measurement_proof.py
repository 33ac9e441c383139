"""Device script for issue 5, second call: H100 ceilings and the ncu-measured roofline of softmax,
layernorm and attention (eager_unfused and triton, bf16, large). Writes at most 8 files to OUT
(the device returns no more): ceilings TOML, one ncu CSV per family, all kernel lists, the
combined roofline (png + csv) and a log.  Usage: python3 scripts/dev/measurement_proof.py OUT"""

import glob
import os
import shutil
import subprocess
import sys
import time

OUT = sys.argv[1]
WORK = "/tmp/rooflint-proof"
os.makedirs(WORK, exist_ok=True)
log = open(os.path.join(OUT, "log.txt"), "w")


def sh(command, timeout):
    started = time.time()
    log.write(f"\n$ {command}\n")
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout)
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        text, code = "", "timeout"
    text = "\n".join(line for line in text.splitlines() if "USDT" not in line and "_warn_once" not in line)
    log.write(text + f"\n[exit {code} in {time.time() - started:.0f}s]\n")
    log.flush()
    print(text[-3000:], f"\n[{command[:60]}: exit {code} in {time.time() - started:.0f}s]", flush=True)


def combined_plot():
    from rooflint.core.specs import current_gpu_spec
    from rooflint.engine.ceilings import measured_overlay
    from rooflint.engine.profile import plot_ncu, read_ncu_csv

    rows = [r for path in sorted(glob.glob(f"{OUT}/ncu_*.csv")) for r in read_ncu_csv(path)]
    spec = current_gpu_spec()
    plot_ncu(rows, spec, os.path.join(OUT, "roofline_ncu"), measured_overlay(spec, OUT))
    os.remove(os.path.join(OUT, "roofline_ncu.svg"))


sh(f"rooflint ceilings --out {OUT}", 60)
kernels = []
for family, limit in (("softmax", 60), ("layernorm", 60), ("attention", 120)):
    out = f"{WORK}/{family}"
    sh(f"rooflint profile {family} -V eager_unfused -V triton --size large --ncu --out {out}", limit)
    if os.path.exists(f"{out}/ncu.csv"):
        shutil.copy(f"{out}/ncu.csv", f"{OUT}/ncu_{family}.csv")
    if os.path.exists(f"{out}/kernels.csv"):
        lines = open(f"{out}/kernels.csv").read().splitlines()
        header = "family," + lines[0]
        kernels += [f"{family},{line}" for line in lines[1:]]
        open(f"{OUT}/kernels.csv", "w").write("\n".join([header, *kernels]) + "\n")
    try:
        combined_plot()
    except Exception as error:  # keep going: the CSVs matter more than the picture
        log.write(f"plot failed: {error}\n")
log.close()
