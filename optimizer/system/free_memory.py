"""Give memory this process has freed back to the system.

glibc's allocator keeps freed heap pages for reuse, so after a step that held several copies of
a model (freezing, transforming, the equivalence check) the process's resident set stays near
its peak although Python and TensorFlow have released the objects. What stays resident counts
against a pod's limit while the next steps (candidate workers, the benchmark) add their own.
``malloc_trim(0)`` returns the free pages at the top of every arena; it is a no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def return_freed_memory() -> None:
    """Collect garbage, then ask glibc to hand free heap pages back (best effort)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
