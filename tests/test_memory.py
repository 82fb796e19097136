"""RSS growth while loading a model, from /proc/self/status."""

import mmap
import sys

import pytest

from tfopt.optimizer.benchmark.memory import measure_rss_growth, read_rss

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MIB = 1 << 20


def test_status_fields_are_read_in_bytes(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
    reading = read_rss(status)
    assert (reading.rss_bytes, reading.peak_bytes) == (1024 * 1024, 2048 * 1024)


def test_missing_status_gives_none(tmp_path):
    assert read_rss(tmp_path / "none") is None
    with measure_rss_growth(status=tmp_path / "none") as growth:
        pass
    assert growth.rss_growth_bytes is None and growth.peak_rss_growth_bytes is None


def test_memory_kept_shows_as_growth():
    with measure_rss_growth() as growth:
        kept = bytearray(64 * MIB)
        kept[::4096] = b"\x01" * len(kept[::4096])  # touch every page so it is resident
    assert growth.rss_growth_bytes >= 56 * MIB
    assert growth.peak_rss_growth_bytes >= growth.rss_growth_bytes
    del kept


def _touched_mapping(size: int) -> mmap.mmap:
    """Anonymous memory, every page touched; ``close()`` returns it to the kernel at once.

    (A bytearray's memory goes through malloc, which may keep it after ``del`` once earlier
    large frees have raised glibc's mmap threshold, and the test would measure the allocator.)
    """
    mapping = mmap.mmap(-1, size)
    for offset in range(0, size, 4096):
        mapping[offset] = 1
    return mapping


def test_a_transient_peak_is_seen_even_after_an_earlier_higher_one():
    _touched_mapping(128 * MIB).close()  # the process's peak is now far above its current RSS
    with measure_rss_growth() as growth:
        _touched_mapping(48 * MIB).close()
    assert growth.peak_exact, "the kernel refused to reset VmHWM"
    assert 40 * MIB <= growth.peak_rss_growth_bytes < 100 * MIB
    assert growth.rss_growth_bytes < 16 * MIB
