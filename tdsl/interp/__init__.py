"""Internals of the reference interpreter (tdsl.interpreter): Python code generation from the IR,
the helpers that code calls, and the calling convention."""
