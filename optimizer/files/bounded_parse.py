"""Parse an untrusted protobuf file without letting it crash or exhaust this process.

A ``saved_model.pb`` from outside can be truncated, random, absurdly large, or built to blow up:
protobuf's parser turns two bytes (an empty repeated message) into a ~100-byte object, so a 40 MB
file of them takes 2 GB to hold, and a 400 MB one takes a worker's whole memory; a real graph
takes 6-9x its file size. Deep nesting is refused by the parser itself (depth 100).

So: a file over ``max_bytes`` is refused from its size alone, before a byte is read (protobuf
itself cannot serialize a message over 2 GiB, the default). A small file (under
:data:`IN_PROCESS_BYTES`, at most a few hundred MB to parse whatever its content) is parsed
here. A larger one is first parsed in a child, a fresh Python interpreter (never a fork: this
process may hold TensorFlow's thread pools and their locks, which a forked child inherits in
whatever state they were), whose address space is capped at :data:`MEMORY_PER_BYTE` times the
file size (and ``max_memory_bytes`` at most) and whose time is bounded; only if the child
succeeds is it parsed here, where it is known to fit. The child imports protobuf alone, not
TensorFlow: it is handed the message's descriptors (a ``FileDescriptorSet``) on its stdin and
builds the message class from them. A child that runs out of memory, crashes or hangs is a
one-line error, never a dead worker.
"""

from __future__ import annotations

import os
import resource
import select
import subprocess
import sys
import time
from pathlib import Path

from tfopt.optimizer.errors import CorruptSavedModelError, OversizedSavedModelError, first_line

MIB = 1 << 20
IN_PROCESS_BYTES = 4 * MIB
MEMORY_PER_BYTE = 16  # real graphs measured at 6-9x; empty-message floods at 20-60x
BASE_MEMORY_BYTES = 256 * MIB
TIMEOUT_SECONDS = 300.0
BYTES_PER_MESSAGE = 100  # what protobuf holds per parsed (even empty) message, at least

# Files the child has parsed within the limits, by identity and content stamp: a model is read
# several times per run and need not be forked for each.
_vetted: set[tuple] = set()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def parse_file(path: Path, message, *, text: bool, label: str, max_bytes: int,
               max_memory_bytes: int) -> None:
    """Parse ``path`` into ``message`` (binary, or text format when ``text``).

    ``label`` names the file in messages, e.g. ``"saved_model.pb in models/cnn"``. Raises
    :class:`OversizedSavedModelError` or :class:`CorruptSavedModelError`, one line each.
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise CorruptSavedModelError(f"cannot read {label}: {exc.strerror or exc}") from None
    if stat.st_size > max_bytes:
        raise _too_large(label, stat.st_size, max_bytes)
    if stat.st_size > IN_PROCESS_BYTES:
        allowance = min(BASE_MEMORY_BYTES + MEMORY_PER_BYTE * stat.st_size, max_memory_bytes)
        stamp = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, allowance, text,
                 type(message).__name__)
        if stamp not in _vetted:
            _parse_in_child(path, type(message), text, label, max_bytes, allowance,
                            stat.st_size)
            _vetted.add(stamp)
    outcome = _parse(path, message, text, max_bytes)
    if outcome is not None:
        raise _error(outcome, label, max_bytes, 0, stat.st_size)


def _too_large(label: str, size: int, max_bytes: int) -> OversizedSavedModelError:
    return OversizedSavedModelError(
        f"{label} is {human_bytes(size)}, over the limit of {human_bytes(max_bytes)} "
        f"(security.max_saved_model_mb)")


def _read_capped(path: Path, max_bytes: int) -> bytes | None:
    """The file's bytes (as many as its size says), or None when over ``max_bytes``."""
    with open(path, "rb") as f:
        # read(n) allocates n bytes up front: ask for the size, not the limit.
        data = f.read(min(os.fstat(f.fileno()).st_size, max_bytes) + 1)
    return None if len(data) > max_bytes else data


def _parse(path: Path, message, text: bool, max_bytes: int) -> str | None:
    """None on success, else an outcome: ``"large"``, ``"memory"`` or ``"corrupt:<why>"``."""
    from google.protobuf import message as pb_message
    from google.protobuf import text_format

    try:
        data = _read_capped(path, max_bytes)
        if data is None:
            return "large"
        if text:
            text_format.Parse(data.decode("utf-8"), message)
        else:
            message.ParseFromString(data)
    except MemoryError:
        return "memory"
    except OSError as exc:
        return f"corrupt:cannot read it: {exc.strerror or exc}"
    except (pb_message.DecodeError, text_format.ParseError, UnicodeDecodeError,
            RuntimeError, ValueError) as exc:  # RecursionError is a RuntimeError
        reason = first_line(exc)
        if "out of memory" in reason.lower() or "alloc failed" in reason.lower():
            return "memory"
        return f"corrupt:{reason}"
    return None


def _error(outcome: str, label: str, max_bytes: int, allowance: int, size: int):
    if outcome == "large":
        return _too_large(label, max_bytes + 1, max_bytes)
    if outcome == "memory":
        limit = f"more than {human_bytes(allowance)}" if allowance else "more memory than is free"
        return OversizedSavedModelError(
            f"{label} ({human_bytes(size)}) needs {limit} to parse: refused as a likely "
            f"memory bomb (real graphs take under 10x their file size)")
    detail = outcome.partition(":")[2] or "unreadable"
    return CorruptSavedModelError(f"corrupt {label}: {detail}")


def _address_space_in_use() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _child(path: Path, message_type, text: bool, max_bytes: int, allowance: int) -> bytes:
    """The child's work, in the child: cap the address space, parse, count, report."""
    try:
        limit = _address_space_in_use() + allowance
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        pass  # no /proc or no rlimits: the timeout still bounds the child
    message = message_type()
    outcome = _parse(path, message, text, max_bytes)
    if outcome is None and _held_messages_exceed(message, allowance // BYTES_PER_MESSAGE):
        outcome = "memory"
    return b"ok" if outcome is None else outcome.encode("utf-8", "replace")[:4000]


def _descriptor_set(message_type) -> bytes:
    """The ``FileDescriptorSet`` of ``message_type``'s file and its imports, imports first."""
    from google.protobuf import descriptor_pb2

    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file) -> None:
        if file.name in files:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        files[file.name] = proto

    add(message_type.DESCRIPTOR.file)
    return descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString()


def _message_class(descriptors: bytes, full_name: str):
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(descriptors).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _child_command(path: Path, full_name: str, text: bool, max_bytes: int,
                   allowance: int) -> list[str]:
    return [sys.executable, "-m", "tfopt.optimizer.files.bounded_parse", str(path), full_name,
            "text" if text else "binary", str(max_bytes), str(allowance)]


def child_main(argv: list[str]) -> int:
    """``python -m tfopt.optimizer.files.bounded_parse PATH FULL_NAME text|binary MAX_BYTES ALLOWANCE``,
    the message's descriptors on stdin; the report on stdout."""
    path, full_name, form, max_bytes, allowance = argv
    message_type = _message_class(sys.stdin.buffer.read(), full_name)
    report = _child(Path(path), message_type, form == "text", int(max_bytes), int(allowance))
    os.write(sys.stdout.fileno(), report)
    return 0


def _held_messages_exceed(message, most: int) -> bool:
    """Whether ``message`` holds more than ``most`` MetaGraphs, nodes and functions.

    The address-space cap alone is not enough in a long-lived process: the child inherits the
    parent's freed but still mapped heap and can parse a flood of empty messages there without
    growing, and the parent would then parse it itself. Counting what a SavedModel holds (with
    an early stop, so a flood costs little to count) catches the floods protobuf can make of
    two-byte messages, whatever the heap looks like."""
    count = 0
    for meta_graph in getattr(message, "meta_graphs", ()):
        graph = meta_graph.graph_def
        count += 1 + len(graph.node) + len(graph.library.function)
        if count > most:
            return True
        for function in graph.library.function:
            count += len(function.node_def)
            if count > most:
                return True
    return False


def _parse_in_child(path: Path, message_type, text: bool, label: str, max_bytes: int,
                    allowance: int, size: int) -> None:
    from tfopt.optimizer.system.worker_process import child_environment

    env = child_environment()
    env.pop("PYTHONFAULTHANDLER", None)  # a crash is reported here, in one line
    child = subprocess.Popen(
        _child_command(path, message_type.DESCRIPTOR.full_name, text, max_bytes, allowance),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    report, deadline = b"", time.monotonic() + TIMEOUT_SECONDS
    try:
        try:
            child.stdin.write(_descriptor_set(message_type))
            child.stdin.close()
        except BrokenPipeError:
            pass  # it died before reading: its status says how
        read_end = child.stdout.fileno()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([read_end], [], [], remaining)[0]:
                child.kill()
                child.wait()
                raise CorruptSavedModelError(
                    f"corrupt {label}: parsing it took longer than {TIMEOUT_SECONDS:.0f} s")
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            report += chunk
    finally:
        child.stdout.close()
    status = child.wait()
    if report == b"ok":
        return
    if report:
        raise _error(report.decode("utf-8", "replace"), label, max_bytes, allowance, size)
    if status < 0:
        # Out of address space, a parser may abort instead of reporting: say both.
        raise CorruptSavedModelError(
            f"corrupt {label}: the parser died with signal {-status} (with a "
            f"{human_bytes(allowance)} memory limit)")
    raise OversizedSavedModelError(
        f"{label} ({human_bytes(size)}) could not be parsed within {human_bytes(allowance)} "
        f"of memory: refused as a likely memory bomb")


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
