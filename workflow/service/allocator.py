"""The C allocator: fewer arenas for a long-running service, and freed memory given back
(glibc only; elsewhere both do nothing).

glibc's malloc gives each thread that allocates while another holds an arena an arena of its
own (up to 8 per core), and memory freed in an arena mostly stays with it. The service's
worker threads (the pruner's transactions and archive, SQLite checkpoints, aiosqlite) each
came to hold megabytes that way, and RSS rose through a soak while the Python heap stayed flat
(see docs/bench.md, eighth pass). With the GIL, threads rarely allocate at the same moment:
two arenas cost no measurable contention. Memory freed inside an arena's heap stays mapped
until `malloc_trim` gives its pages back; the pruner calls `trim` after each pass, which frees
the most at once (the audit prefix it read, the archive's text).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

log = logging.getLogger("headgate.service")

#: `mallopt`'s parameter number for the arena limit (glibc's malloc.h).
_M_ARENA_MAX = -8
ARENAS = 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has mallopt as a no-op stub)
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> bool:
    """Give the allocator's free pages back to the system (`malloc_trim(0)`); False where
    there is no glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.malloc_trim(0)
    return True


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Limit glibc's malloc to `arenas` arenas, unless `MALLOC_ARENA_MAX` already says how
    many; call it before threads start. False (and nothing changed) on another C library."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_ARENA_MAX, arenas))
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return done
