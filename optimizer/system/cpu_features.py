"""What this machine's CPU can do, read from ``/proc/cpuinfo`` (Linux; elsewhere: nothing).

A graph rewritten for an instruction set the serving CPU lacks still runs, but through slow
emulation; transforms that target one (bfloat16 through oneDNN) ask here first.
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# Native bfloat16 arithmetic: AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4) or AMX-BF16.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The feature flags the kernel reports for the first CPU; empty when it cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_supports_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """True when the CPU has native bfloat16 instructions (AVX512_BF16 or AMX-BF16)."""
    return bool(BF16_FLAGS & cpu_flags(cpuinfo))


# Instruction sets that decide how fast TF's oneDNN kernels run: the fingerprint of a benchmark
# records which of them the machine had. Several kernel spellings can mean one feature.
ISA_FEATURES = {
    "avx2": ("avx2",),
    "avx512": ("avx512f",),
    "vnni": ("avx512_vnni", "avx_vnni"),
    "bf16": ("avx512_bf16", "amx_bf16"),
    "amx": ("amx_tile",),
}


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The first CPU's model name (``model name``, or ``Processor`` on ARM); '' when unknown."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Processor", "cpu model"):
            return value.strip()
    return ""


def isa_support(cpuinfo: Path = CPUINFO) -> dict[str, bool]:
    """``{"avx2": True, "avx512": ..., "vnni": ..., "bf16": ..., "amx": ...}`` for this CPU."""
    flags = cpu_flags(cpuinfo)
    return {name: any(f in flags for f in spellings) for name, spellings in ISA_FEATURES.items()}
