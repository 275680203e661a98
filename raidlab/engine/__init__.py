"""The raidlab block engine: architectures (layouts, caches, tiers) over member disks.

`raidlab.engine.layouts` holds the pure mapping functions (logical byte range -> physical
requests on members); the trio request path, statistics and metadata are built around them.
"""
