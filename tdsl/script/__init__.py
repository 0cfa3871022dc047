"""Script <-> IR: the T namespace, the parser and the printer."""
from ..ir import printing as _printing
from ..tracebacks import public_entry
from . import T
from .highlight import show as _show
from .highlight import show_function as _show_function
from .highlight import to_html as _to_html
from .html import function_html as _function_html
from .parser import parse as _parse
from .printer import message_text as _message_text
from .printer import script as _script
from .printer import summary as _summary
from .T import prim_func

_printing.register(script=_script, message_text=_message_text, show=_show, to_html=_to_html, summary=_summary,
                   show_function=_show_function, function_html=_function_html)
parse = public_entry(_parse)

__all__ = ["T", "parse", "prim_func"]
