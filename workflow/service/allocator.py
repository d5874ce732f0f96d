"""The C allocator's arenas: fewer of them for a long-running service (glibc only).

glibc's malloc gives each thread that allocates while another holds an arena an arena of its
own (up to 8 per core), and memory freed in an arena mostly stays with it. The service's
worker threads (the pruner's transactions and archive, SQLite checkpoints, aiosqlite) each
came to hold megabytes that way, and RSS rose through a soak while the Python heap stayed flat
(see docs/bench.md, eighth pass). With the GIL, threads rarely allocate at the same moment:
two arenas cost no measurable contention.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("headgate.service")

#: `mallopt`'s parameter number for the arena limit (glibc's malloc.h).
_M_ARENA_MAX = -8
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Limit glibc's malloc to `arenas` arenas, unless `MALLOC_ARENA_MAX` already says how
    many; call it before threads start. False (and nothing changed) on another C library."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has mallopt as a no-op stub)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_ARENA_MAX, arenas))
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return done
