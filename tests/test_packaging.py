"""The wheel installs one top-level name, ``tfopt``: the repo's folders are its subpackages, so a
user's own ``optimizer``, ``components`` or ``dags`` (an Airflow dags folder is on sys.path)
never collides with ours."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"tfopt": "tfopt", "optimizer": "tfopt.optimizer", "components": "tfopt.components",
           "dags": "tfopt.dags"}


def _declared() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_declared_under_the_tfopt_name():
    found = {
        FOLDERS[init.parent.relative_to(REPO).parts[0]] + "".join(
            f".{part}" for part in init.parent.relative_to(REPO).parts[1:])
        for folder in FOLDERS for init in (REPO / folder).rglob("__init__.py")}
    assert set(_declared()["packages"]) == found
    assert _declared()["package-dir"] == {name: folder for folder, name in FOLDERS.items()}


def test_the_wheel_holds_tfopt_alone_with_the_dags_yaml(tmp_path):
    # built from a copy: setuptools leaves its build/ tree beside the sources
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    uv = Path(sys.executable).with_name("uv")
    done = subprocess.run([str(uv), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path),
                           str(source)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("tfopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"tfopt"}
    assert "tfopt/dags/model_optimization.yaml" in names
    assert "tfopt/components/pipeline/step_table.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tfopt = tfopt.components.cli:entry_point" in zipfile.ZipFile(wheel).read(
        entry_points).decode()


def test_import_tfopt_loads_neither_tensorflow_nor_mlflow():
    code = ("import sys, tfopt; print(tfopt.__version__); "
            "print(sorted(m for m in ('tensorflow', 'mlflow', 'airflow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd="/", timeout=120, check=True)
    version, loaded = done.stdout.split("\n")[:2]
    assert version != "0+unknown"
    assert loaded == "[]"


def test_no_generic_top_level_name_is_importable_outside_the_checkout():
    code = ("import importlib.util as u; "
            "print([n for n in ('optimizer', 'components', 'dags') if u.find_spec(n)])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd="/", timeout=120, check=True)
    assert done.stdout.strip() == "[]"
