"""Which node a request comes from, for members that care (the cluster's virtual twin).

A request to the engine is issued by some client; on a cluster, the client's node decides
which cables a member request crosses. ORIGIN holds that node (None: no node, the request is
the engine's own or the array is not on a cluster). It is a context variable: trio and
raidlab's kernel give each task a copy of the context of the task that started it, so every
member request the engine issues for a client's request carries the client's node down to
the member, without any layout or architecture passing it along. Work the engine defers (RAID-x's images kept in
memory) records the origin of the write that caused it and sets it again when done later.
"""

from __future__ import annotations

import contextvars

ORIGIN: contextvars.ContextVar[int | None] = contextvars.ContextVar("raidlab_request_origin", default=None)
