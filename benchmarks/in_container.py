"""The optimize step's speedups inside a CPU-limited container of the image, against the host.

    .venv/bin/python benchmarks/in_container.py [--cpus 2] [--families digits,lstm]

What a user on CPU nodes sees: for each family (a convnet and the LSTM tagger, exported as
benchmarks/families.py exports them), ``tfopt optimize SRC DST --targets
savedmodel,litert,onnx,openvino --seconds 3`` once on the host (this venv) and once in
``podman run --cpus N --memory 6g`` of the image, the model mounted read-only and the output
written to a mounted directory. Prints each candidate's speedup over the baseline as each run
measured it (ratios within one run: absolute times on a shared machine mean little) and the
CPU's model name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(REPO))
from families import ALL_TARGETS, FAMILIES

from container.pods import IMAGE_UID, podman_env

WORK = REPO / "work" / "in-container"


def optimize_command(src: str, dst: str, eval_data: str | None) -> list[str]:
    command = ["optimize", src, dst, "--targets", ALL_TARGETS, "--seconds", "3", "--overwrite"]
    return command + (["--eval-data", eval_data] if eval_data else [])


def speedups(dst: Path) -> dict[str, float]:
    found = dst / "candidates.json"
    beside = dst.parent / f"{dst.name}.candidates.json"
    selection = json.loads((found if found.is_file() else beside).read_text())
    return {row["label"]: row["speedup"] for row in selection["candidates"]
            if row.get("speedup") is not None}


def run_host(src: Path, eval_data: Path | None, out: Path) -> dict[str, float]:
    dst = out / "host" / "optimized"
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(out / "host.log", "w") as log:
        subprocess.run([str(REPO / ".venv" / "bin" / "tfopt"),
                        *optimize_command(str(src), str(dst), eval_data and str(eval_data))],
                       stdout=log, stderr=subprocess.STDOUT, check=False, cwd=REPO)
    return speedups(dst)


def run_container(src: Path, eval_data: Path | None, out: Path, image: str,
                  cpus: str) -> dict[str, float]:
    target = out / "container"
    target.mkdir(parents=True, exist_ok=True)
    os.chown(target, IMAGE_UID, IMAGE_UID)
    mounts = ["-v", f"{src.parent}:/models:ro", "-v", f"{target}:/out"]
    with open(out / "container.log", "w") as log:
        subprocess.run(["podman", "run", "--rm", "--network", "none", "--cpus", cpus,
                        "--memory", "6g", *mounts, image,
                        *optimize_command(f"/models/{src.name}", "/out/optimized",
                                          eval_data and f"/models/{eval_data.name}")],
                       stdout=log, stderr=subprocess.STDOUT, check=False, env=podman_env())
    return speedups(target / "optimized")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpus", default="2")
    parser.add_argument("--image", default="tfopt:0.1.0")
    parser.add_argument("--families", default="digits,lstm")
    args = parser.parse_args(argv)
    cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
        if line.startswith("Model name"))
    print(f"CPU: {cpu}; container: --cpus {args.cpus} --memory 6g of {args.image}")
    for name in args.families.split(","):
        family = FAMILIES[name]
        workdir = WORK / name
        src = family.export(workdir).resolve()
        eval_data = (workdir / family.eval_data).resolve() if family.eval_data else None
        if eval_data is not None and eval_data.parent != src.parent:
            raise SystemExit(f"{name}: eval data {eval_data} not beside the model")
        host = run_host(src, eval_data, workdir)
        inside = run_container(src, eval_data, workdir, args.image, args.cpus)
        print(f"\n{name}: speedup over its baseline, host | container")
        for label in sorted(set(host) | set(inside), key=lambda k: -max(host.get(k, 0),
                                                                      inside.get(k, 0))):
            cells = [f"{d[label]:.2f}x" if label in d else "-" for d in (host, inside)]
            print(f"  {label:<34} {cells[0]:>7} | {cells[1]:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
