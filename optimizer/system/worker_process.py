"""A child Python process spoken to in JSON lines: commands on its stdin, answers on its stdout.

TensorFlow sizes its thread pools once per process, so anything that must run under a thread
setting other than this process's runs in a child started for it. The child's stderr goes to a
temporary file whose last line explains a crash; EOF on its stdin tells it to exit, so a child
never outlives the pipe of a parent that died.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfopt.optimizer.errors import ModelCallTimeoutError, TfoptError, first_line


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child ``python -m tfopt.optimizer...``, which finds
    tfopt where this process did (it is installed); TensorFlow's C++ logs quiet unless asked
    for, plus ``env``."""
    child_env = dict(os.environ)
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    child_env.update(env or {})
    return child_env


@dataclass(frozen=True)
class JobOutcome:
    returncode: int  # negative: killed by that signal
    answer: str | None  # what the child wrote to its answer file, None if nothing
    stderr: str
    # with a memory limit: the tree's bytes when the watchdog killed the child (None: it did
    # not), and the peak of the child's own tree (None: not measured)
    stopped_at_bytes: int | None = None
    peak_bytes: int | None = None

    def last_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else "no output"


def run_job(module: str, job: object, directory: str | os.PathLike | None = None,
            memory_limit: int | None = None) -> JobOutcome:
    """Run ``python -m module JOB ANSWER`` to completion: ``job`` pickled into JOB (parent and
    child are the same code; nothing else reads it), the child writing ANSWER (temp then
    rename) before it exits. Its stderr (its log) is passed on to this process's once it has
    exited. Returns when the child is gone, so its memory is back. The job file goes in
    ``directory`` (default: the system's temporary directory; give one on disk for a large
    job, as a tmpfs is memory). With ``memory_limit`` (bytes), a
    :class:`~tfopt.optimizer.system.memory_watchdog.MemoryWatchdog` kills the child (SIGKILL, its
    process group) once this process's tree crosses it: the outcome says at what figure. A
    child whose model call passed its deadline (exit 9) is raised as
    :class:`~tfopt.optimizer.errors.ModelCallTimeoutError` with its last line."""
    import pickle

    from tfopt.optimizer.system.memory_watchdog import MemoryWatchdog

    with tempfile.TemporaryDirectory(prefix=".tfopt-job-", dir=directory) as scratch:
        job_path, answer = Path(scratch) / "job.pickle", Path(scratch) / "answer"
        with open(job_path, "wb") as out:
            pickle.dump(job, out, protocol=pickle.HIGHEST_PROTOCOL)
        with tempfile.TemporaryFile() as stderr:
            # its own process group, so that the watchdog's kill takes its helpers with it
            child = subprocess.Popen([sys.executable, "-m", module, str(job_path), str(answer)],
                                     stdin=subprocess.DEVNULL, stderr=stderr,
                                     env=child_environment(), process_group=0)
            watchdog = MemoryWatchdog(child.pid, memory_limit) if memory_limit else None
            try:
                if watchdog is None:
                    code = child.wait()
                else:
                    with watchdog:
                        code = child.wait()
            finally:
                # interrupted (Ctrl-C reaches the terminal's group, not the child's): no orphan
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
            stderr.seek(0)
            errors = stderr.read().decode(errors="replace")
        if code == ModelCallTimeoutError.exit_code:
            # the child's model call passed its deadline (tfopt.optimizer.runtime.call_deadline):
            # its last line says which, and ends this run too
            raise ModelCallTimeoutError(JobOutcome(code, None, errors).last_line())
        if errors.strip():
            sys.stderr.write(errors)
        return JobOutcome(code, answer.read_text() if answer.is_file() else None, errors,
                          stopped_at_bytes=watchdog.stopped_at if watchdog else None,
                          peak_bytes=watchdog.worker_peak if watchdog else None)


def read_job(argv: Sequence[str]) -> tuple[object, Callable[[str], None]]:
    """The child's side of :func:`run_job`: the job, and how to write the answer."""
    import pickle

    job_path, answer = Path(argv[0]), Path(argv[1])
    with open(job_path, "rb") as job_file:
        job = pickle.load(job_file)

    def write_answer(text: str) -> None:
        staging = answer.with_name(answer.name + ".partial")
        staging.write_text(text)
        staging.rename(answer)
    return job, write_answer


class WorkerProcess:
    """``python -m module *args`` with this package importable and ``env`` added to its
    environment. ``name`` says which worker in errors, raised as ``error``. ``own_group``: it
    leads a process group of its own, so that a
    :class:`~tfopt.optimizer.system.memory_watchdog.MemoryWatchdog` can kill it (a terminal's Ctrl-C
    then does not reach it; it exits on EOF when this process is gone)."""

    def __init__(self, module: str, args: Sequence[str], name: str,
                 env: Mapping[str, str] | None = None, error: type[Exception] = TfoptError,
                 own_group: bool = False):
        self.name, self.error = name, error
        self._buffer = b""
        # Lives as long as the worker; close() closes it.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        child_env = child_environment(env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=child_env,
            process_group=0 if own_group else None)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().decode(errors="replace").splitlines()
                 if ln.strip()]
        return lines[-1].strip() if lines else "no output"

    def _exited(self) -> Exception:
        code = self.process.wait()
        if code == ModelCallTimeoutError.exit_code:  # a model call past its deadline
            return ModelCallTimeoutError(self._stderr_tail())
        return self.error(f"{self.name} exited with code {code}: {self._stderr_tail()}")

    def send(self, message: dict) -> None:
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._exited() from None

    def receive(self, timeout: float) -> dict:
        """The next answer; an ``{"error": ...}`` answer is raised."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.error(f"{self.name} did not answer within {timeout:.0f}s")
            readable, _, _ = select.select([self.process.stdout], [], [], remaining)
            if readable:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise self._exited()
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if "error" in message:
            raise self.error(f"{self.name}: {message['error']}")
        return message

    def request(self, message: dict, timeout: float) -> dict:
        self.send(message)
        return self.receive(timeout)

    def release(self) -> None:
        """Tell the worker to exit (EOF on its stdin) without waiting for it."""
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        self.release()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        finally:
            self.process.stdout.close()
            self._stderr.close()


Handler = Callable[[dict], dict]


def serve(start: Callable[[], tuple[dict, Handler]]) -> int:
    """The worker side: ``start()`` gives the ready message and the handler of each command
    line; EOF on stdin ends it. A failure is answered ``{"error": "one line"}`` and ends the
    worker with the error's exit code (1 for an unexpected one, its traceback on stderr)."""
    # The protocol gets a private copy of stdout; anything a library prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        ready, handle = start()
        send(ready)
        for line in iter(sys.stdin.readline, ""):
            send(handle(json.loads(line)))
    except TfoptError as exc:
        send({"error": str(exc)})
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - reported to the parent, traceback on stderr
        import traceback

        traceback.print_exc()
        send({"error": f"{type(exc).__name__}: {first_line(exc)}"})
        return 1
    return 0
