"""Block traces as data: streaming readers and a writer (formats), statistics (stats),
synthetic office/engineering traces (synth), and the recorder a live lab's volume uses
(capture). Replaying a trace in virtual time is a runner's work (raidlab.runners.virtual).

Submodules are imported on demand so that `raidlab trace stats` does not pull in trio.
"""

from raidlab.traces.formats import OPS, Request, TraceError, TraceReader, format_names, read_trace

__all__ = ["OPS", "Request", "TraceError", "TraceReader", "format_names", "read_trace"]
