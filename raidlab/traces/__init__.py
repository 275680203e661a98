"""Block traces: streaming readers and a writer (formats), statistics (stats), synthetic
office/engineering traces (synth), virtual-time replay on the engine (replay, on the clock
of clock.py), the caching architectures' replay layouts (cachearchs), kind = "sim" scenario
runs (experiment), and recording a live lab's volume (capture).

Issue 7; DESIGN.md "One engine, two clocks". Submodules are imported on demand so that
`raidlab trace stats` does not pull in trio and the engine.
"""

from raidlab.traces.formats import OPS, Request, TraceError, TraceReader, format_names, read_trace

__all__ = ["OPS", "Request", "TraceError", "TraceReader", "format_names", "read_trace"]
