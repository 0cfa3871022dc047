"""Script <-> IR: the T namespace, the parser and the printer."""
from . import T
from .parser import parse
from .T import prim_func

__all__ = ["T", "parse", "prim_func"]
