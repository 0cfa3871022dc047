"""Script <-> IR: the T namespace, the parser and the printer."""
from . import T
from ..tracebacks import public_entry
from .parser import parse as _parse
from .T import prim_func

parse = public_entry(_parse)

__all__ = ["T", "parse", "prim_func"]
