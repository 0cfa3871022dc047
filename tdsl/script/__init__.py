"""Script <-> IR: the T namespace, the parser and the printer."""
from ..ir import printing as _printing
from . import T
from .highlight import show as _show
from .highlight import to_html as _to_html
from .parser import parse
from .printer import message_text as _message_text
from .printer import script as _script
from .T import prim_func

_printing.register(script=_script, message_text=_message_text, show=_show, to_html=_to_html)

__all__ = ["T", "parse", "prim_func"]
