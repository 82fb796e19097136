"""The environment fingerprint: CPU model and ISA from /proc/cpuinfo, versions, model digest."""

import shutil
from importlib.metadata import version

from tfopt.optimizer.benchmark.environment import Environment, capture_environment, model_digest
from tfopt.optimizer.system.cpu_features import cpu_model, isa_support
from tfopt.optimizer.system.cpu_threads import apply_runtime_settings, default_runtime_settings

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""

HASWELL = """processor\t: 0
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
flags\t\t: fpu sse2 avx avx2 fma
"""

ALDER_LAKE = """processor\t: 0
model name\t: 12th Gen Intel(R) Core(TM) i7-1260P
flags\t\t: avx avx2 avx_vnni
"""


def test_cpu_model_and_isa_of_a_sapphire_rapids(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS)
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) Platinum 8480+"
    assert isa_support(cpuinfo) == {"avx2": True, "avx512": True, "vnni": True, "bf16": True,
                                    "amx": True}


def test_isa_of_a_cpu_without_avx512(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(HASWELL)
    assert isa_support(cpuinfo) == {"avx2": True, "avx512": False, "vnni": False,
                                    "bf16": False, "amx": False}
    cpuinfo.write_text(ALDER_LAKE)
    assert isa_support(cpuinfo)["vnni"] is True  # AVX-VNNI counts, not only AVX512_VNNI


def test_unreadable_cpuinfo_gives_unknown_not_an_error(tmp_path):
    missing = tmp_path / "nothing"
    assert cpu_model(missing) == ""
    assert not any(isa_support(missing).values())


def test_model_digest_is_stable_and_follows_content(model_dir, tmp_path):
    src = model_dir("tf1_saved_model")
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    digest = model_digest(src)
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert model_digest(copy) == digest  # path and listing order do not matter
    (copy / "assets.extra").mkdir(exist_ok=True)
    (copy / "assets.extra" / "note.txt").write_text("x")
    assert model_digest(copy) != digest
    (copy / "assets.extra" / "note.txt").unlink()
    assert model_digest(copy) == digest
    variables = min((copy / "variables").iterdir())
    variables.write_bytes(variables.read_bytes()[:-1] + b"\x00")
    assert model_digest(copy) != digest


def test_digest_distinguishes_a_rename(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "one").write_text("same")
    (b / "two").write_text("same")
    assert model_digest(a) != model_digest(b)


def test_fingerprint_records_machine_versions_and_threads():
    runtime = apply_runtime_settings(default_runtime_settings())
    env = capture_environment(runtime)
    import tensorflow as tf

    assert env.tensorflow_version == tf.__version__
    assert env.tfopt_version == version("tfopt")
    assert set(env.isa) == {"avx2", "avx512", "vnni", "bf16", "amx"}
    assert env.runtime.cpus.available >= 1
    # what TensorFlow really runs with, whether or not the settings could still be applied
    assert env.runtime == runtime
    assert env.runtime.intra_op_threads == tf.config.threading.get_intra_op_parallelism_threads()
    assert Environment.from_dict(env.to_dict()) == env
    assert "TF " + tf.__version__ in env.summary()
