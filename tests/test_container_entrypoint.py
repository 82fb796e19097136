"""The image's entrypoint: thread settings from the container's CPU quota, then exec the command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfopt.components.orchestration.container_entrypoint import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    environment_for_command,
    main,
    thread_environment,
)
from tfopt.optimizer.system.cpu_threads import CpuAvailability, available_cpus

REPO = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


class RecordedExec:
    """Stands in for ``os.execvpe``: records the call instead of replacing the test process."""

    def __init__(self):
        self.calls = []

    def __call__(self, file, args, env):
        self.calls.append((file, list(args), dict(env)))

    @property
    def env(self):
        assert len(self.calls) == 1, "the command must be executed exactly once"
        return self.calls[0][2]


@pytest.fixture
def cgroup_v2(tmp_path):
    """A fake cgroup v2 root; the process sits in its root cgroup."""
    root = tmp_path / "cgroup"
    root.mkdir()
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/\n")
    return root, proc


def run_main(argv, root, proc, environ=None):
    recorded = RecordedExec()
    code = main(argv, environ={} if environ is None else environ, cgroup_root=root,
                proc_cgroup=proc, exec_command=recorded)
    return code, recorded


def test_quota_of_two_cpus_on_a_64_core_node_gives_two_threads_everywhere():
    cpus = CpuAvailability(logical_cpus=64, affinity_cpus=64, quota_cpus=2.0,
                           quota_source="/sys/fs/cgroup/cpu.max")
    env = thread_environment(cpus)
    assert env == {"OMP_NUM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "2",
                   "TF_NUM_INTEROP_THREADS": "1"}


def test_fractional_v2_quota_rounds_down_and_reaches_the_command(cgroup_v2):
    root, proc = cgroup_v2
    (root / "cpu.max").write_text("150000 100000\n")
    code, recorded = run_main(["tfopt", "step", "benchmark"], root, proc)
    assert code == 0
    file, args, env = recorded.calls[0]
    assert (file, args) == ("tfopt", ["tfopt", "step", "benchmark"])
    assert {k: env[k] for k in THREAD_VARS} == {
        "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def test_v1_quota_of_the_process_cgroup_is_read(tmp_path):
    root = tmp_path / "cgroup"
    own = root / "cpu,cpuacct" / "kubepods" / "pod1"
    own.mkdir(parents=True)
    (own / "cpu.cfs_quota_us").write_text("100000\n")
    (own / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("4:cpu,cpuacct:/kubepods/pod1\n")
    code, recorded = run_main(["true"], root, proc)
    assert code == 0
    assert recorded.env["OMP_NUM_THREADS"] == "1"
    assert recorded.env["TF_NUM_INTRAOP_THREADS"] == "1"


def test_a_quota_above_the_machine_is_capped_by_the_cpus_really_there(cgroup_v2):
    root, proc = cgroup_v2
    (root / "cpu.max").write_text("12800000 100000\n")  # 128 CPUs of quota
    _, recorded = run_main(["true"], root, proc)
    really_there = min(os.cpu_count(), len(os.sched_getaffinity(0)))
    assert really_there < 128
    assert recorded.env["TF_NUM_INTRAOP_THREADS"] == str(really_there)


def test_values_set_by_the_user_are_kept(cgroup_v2):
    root, proc = cgroup_v2
    (root / "cpu.max").write_text("100000 100000\n")
    user_env = {"OMP_NUM_THREADS": "7", "PATH": "/usr/bin"}
    _, recorded = run_main(["true"], root, proc, environ=user_env)
    assert recorded.env["OMP_NUM_THREADS"] == "7"
    assert recorded.env["TF_NUM_INTRAOP_THREADS"] == "1"
    assert recorded.env["PATH"] == "/usr/bin"
    assert user_env == {"OMP_NUM_THREADS": "7", "PATH": "/usr/bin"}, "caller's mapping mutated"


def test_only_missing_values_are_reported_as_filled():
    env, filled = environment_for_command({"TF_NUM_INTEROP_THREADS": "4"},
                                          {"TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "2"})
    assert env == {"TF_NUM_INTEROP_THREADS": "4", "OMP_NUM_THREADS": "2"}
    assert filled == {"OMP_NUM_THREADS": "2"}


def test_no_command_is_a_usage_error(cgroup_v2, capsys):
    root, proc = cgroup_v2
    code, recorded = run_main([], root, proc)
    assert code == EXIT_USAGE
    assert recorded.calls == []
    assert "usage:" in capsys.readouterr().err


def test_real_exec_runs_the_command_with_the_settings_and_its_exit_code():
    probe = ("import json, os, sys; "
             "print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]})); sys.exit(5)")
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["TF_NUM_INTEROP_THREADS"] = "3"
    done = subprocess.run(
        [sys.executable, "-m", "tfopt.components.orchestration.container_entrypoint",
         sys.executable, "-c", probe, *THREAD_VARS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 5, done.stderr
    seen = json.loads(done.stdout)
    expected = str(available_cpus().available)
    assert seen == {"OMP_NUM_THREADS": expected, "TF_NUM_INTRAOP_THREADS": expected,
                    "TF_NUM_INTEROP_THREADS": "3"}
    assert "tfopt-entrypoint:" in done.stderr


def test_a_missing_command_exits_127_with_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "tfopt.components.orchestration.container_entrypoint", "no-such-command-tfopt"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_NOT_FOUND
    assert done.stderr.strip().splitlines()[-1] == (
        "tfopt-entrypoint: command not found: no-such-command-tfopt")


TF_POOL_PROBE = """
import collections, glob, json
import tensorflow as tf
x = tf.random.normal((64, 64))
tf.matmul(x, x).numpy()
names = collections.Counter(open(p).read().strip() for p in glob.glob("/proc/self/task/*/comm"))
print(json.dumps({"inter_op_pool": names["tf_Compute"]}))
"""


def test_tensorflow_sizes_its_inter_op_pool_from_what_the_entrypoint_exports():
    # TF names its inter-op pool threads tf_Compute; left alone it starts one per CPU.
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    done = subprocess.run(
        [sys.executable, "-m", "tfopt.components.orchestration.container_entrypoint",
         sys.executable, "-c", TF_POOL_PROBE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = int(thread_environment(available_cpus())["TF_NUM_INTEROP_THREADS"])
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"inter_op_pool": expected}


def test_the_entrypoint_imports_no_tensorflow():
    code = ("import sys, tfopt.components.orchestration.container_entrypoint; "
            "print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.strip() == "False", done.stderr
