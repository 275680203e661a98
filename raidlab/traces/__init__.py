"""Block traces: streaming readers and a writer (formats), statistics (stats), synthetic
office/engineering traces (synth), and virtual-time replay on the engine (replay).

Issue 7; DESIGN.md "One engine, two clocks". Submodules are imported on demand so that
`raidlab trace stats` does not pull in trio and the engine.
"""

from raidlab.traces.formats import OPS, Request, TraceError, TraceReader, format_names, read_trace

__all__ = ["OPS", "Request", "TraceError", "TraceReader", "format_names", "read_trace"]
