"""The Parser: one class assembled from the parts, one per kind of construct."""
from __future__ import annotations

from .async_copies import AsyncCallParser
from .blocks import BlockParser
from .buffers import BufferParser
from .calls import CallParser
from .expressions import ExpressionParser
from .mbarriers import MbarrierCallParser
from .signature import SignatureParser
from .statements import StatementParser
from .tvm_compat import TVMCallParser


class Parser(AsyncCallParser, MbarrierCallParser, SignatureParser, BufferParser, StatementParser, BlockParser, ExpressionParser,
             CallParser, TVMCallParser):
    """Reads one `@T.prim_func` function's AST into a PrimFunc (see the parts' modules)."""
