"""Thin wrappers of the external programs raidlab drives, one module each.

Every call goes through `raidlab.tools.base.run`, which finds the program (or raises
MissingToolError with the package to install) and turns a failure into ToolFailedError.
"""
