"""CPUs really available (affinity, cgroup v1/v2 quota) and TF thread settings."""

import json
import subprocess
import sys
import textwrap

import pytest

from tfopt.optimizer.system.cpu_threads import (
    RuntimeSettings,
    available_cpus,
    cgroup_cpu_quota,
    default_runtime_settings,
)


@pytest.fixture
def cgroup(tmp_path):
    """An empty fake cgroup root directory."""
    root = tmp_path / "cgroup"
    root.mkdir()
    return root


NO_PROC = "/nonexistent/proc/self/cgroup"  # read as: the process sits in the root cgroup


def cpus(root, affinity=frozenset(range(64)), proc=NO_PROC):
    from pathlib import Path

    return available_cpus(root, Path(proc), affinity=affinity, logical_cpus=64)


def test_v2_quota_of_two_cpus_on_a_64_core_node_gives_two(cgroup):
    (cgroup / "cpu.max").write_text("200000 100000\n")
    result = cpus(cgroup)
    assert result.quota_cpus == 2.0
    assert result.quota_source.endswith("cpu.max")
    assert result.available == 2
    assert default_runtime_settings(cpus=result).intra_op_threads == 2


def test_v2_max_means_no_limit(cgroup):
    (cgroup / "cpu.max").write_text("max 100000\n")
    result = cpus(cgroup)
    assert result.quota_cpus is None
    assert result.available == 64


def test_fractional_quota_rounds_down_but_never_below_one(cgroup):
    (cgroup / "cpu.max").write_text("150000 100000\n")
    assert cpus(cgroup).available == 1
    (cgroup / "cpu.max").write_text("50000 100000\n")
    assert cpus(cgroup).available == 1


def test_v1_quota_files(cgroup):
    v1 = cgroup / "cpu,cpuacct"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    result = cpus(cgroup)
    assert result.quota_cpus == 4.0
    assert result.quota_source.endswith("cpu.cfs_quota_us")
    assert result.available == 4


def test_v1_quota_of_minus_one_means_no_limit(cgroup):
    v1 = cgroup / "cpu"
    v1.mkdir()
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus(cgroup).quota_cpus is None


def test_a_parent_cgroups_tighter_limit_binds(cgroup, tmp_path):
    # The process lives in /kubepods/pod1; the pod allows 3 CPUs, its parent only 2.
    (cgroup / "kubepods" / "pod1").mkdir(parents=True)
    (cgroup / "kubepods" / "cpu.max").write_text("200000 100000\n")
    (cgroup / "kubepods" / "pod1" / "cpu.max").write_text("300000 100000\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/kubepods/pod1\n")
    quota, source = cgroup_cpu_quota(cgroup, proc)
    assert quota == 2.0
    assert source == str(cgroup / "kubepods" / "cpu.max")


def test_affinity_smaller_than_the_quota_wins(cgroup):
    (cgroup / "cpu.max").write_text("800000 100000\n")
    result = cpus(cgroup, affinity={0, 1, 2})
    assert (result.affinity_cpus, result.quota_cpus, result.available) == (3, 8.0, 3)


def test_no_cgroup_files_leaves_affinity(cgroup):
    result = cpus(cgroup, affinity={5})
    assert result.quota_cpus is None and result.quota_source == ""
    assert result.available == 1


def test_garbage_in_cpu_max_is_ignored(cgroup):
    (cgroup / "cpu.max").write_text("lots\n")
    assert cpus(cgroup).quota_cpus is None


def test_settings_become_env_vars():
    settings = RuntimeSettings(intra_op_threads=4, inter_op_threads=1, omp_num_threads=4,
                               kmp_blocktime=1, kmp_affinity="granularity=fine,compact,1,0",
                               onednn=False)
    assert settings.env_vars() == {"OMP_NUM_THREADS": "4", "KMP_BLOCKTIME": "1",
                                   "KMP_AFFINITY": "granularity=fine,compact,1,0",
                                   "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert RuntimeSettings.from_dict(settings.to_dict()) == settings


def test_explicit_threads_override_the_cpu_count(cgroup):
    (cgroup / "cpu.max").write_text("200000 100000\n")
    settings = default_runtime_settings(threads=3, cpus=cpus(cgroup))
    assert (settings.intra_op_threads, settings.omp_num_threads) == (3, 3)


def test_settings_apply_before_tf_starts_and_are_recorded_as_not_in_effect_after():
    # A fresh interpreter: TF has not started, so the first settings take; the second call
    # comes after TF's context exists and must say so rather than claim 3 threads.
    script = textwrap.dedent("""
        import json, os
        from tfopt.optimizer.system.cpu_threads import RuntimeSettings, apply_runtime_settings
        first = apply_runtime_settings(RuntimeSettings(1, 1, 1, kmp_blocktime=1))
        import tensorflow as tf
        tf.constant(1.0) + 1.0
        second = apply_runtime_settings(RuntimeSettings(3, 2, 3))
        print(json.dumps({"first": first.to_dict(), "second": second.to_dict(),
                          "omp": os.environ["OMP_NUM_THREADS"]}))
    """)
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first, second = out["first"], out["second"]
    assert first["settings_in_effect"] is True
    assert (first["intra_op_threads"], first["inter_op_threads"]) == (1, 1)
    assert first["env"]["OMP_NUM_THREADS"] == "1" and first["env"]["KMP_BLOCKTIME"] == "1"
    assert second["settings_in_effect"] is False
    assert (second["intra_op_threads"], second["inter_op_threads"]) == (1, 1)
    assert "initialised before the settings were applied" in second["notes"][0]
    assert out["omp"] == "3"
