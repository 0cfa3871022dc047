"""Parser fuzzing: mutated scripts either parse (and then round-trip) or raise ScriptError.

Sources are the printed scripts of the corpus kernels and of generated programs; mutations
delete, insert, duplicate and swap tokens, replace identifiers and numbers by random ones,
and change indentation or whole lines. Any exception other than ScriptError is a bug, and so
is a ScriptError without a line number.
"""
from __future__ import annotations

import re

from corpus import CORPUS
from fuzz.fuzz_common import assert_roundtrip, fuzz_settings
from fuzz.gen_programs import programs
from hypothesis import given
from hypothesis import strategies as st

import tdsl

TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+\.\d*|\d+|\"[^\"]*\"|\*\*|//|==|!=|<=|>=|\+=|\S")
SOURCES = [case.func.script() for case in CORPUS]
INSERTS = ["(", ")", ",", ":", "T.", "+", "=", "[", "]", ".", "-", "*", "//", "%", "**", "not", "and", "lambda",
           "None", "0", "-1", "99999999999", "1e400", "0.5", "\"float32\"", "\"n\"", "\"bogus\"", "T.block",
           "T.init()", "T.axis.remap", "T.Buffer", "for", "in", "with", "if", "else:", "return", "yield", "await",
           "print", "__import__", "...", "@", "\\", "\t", "'", "#", "range", "T.grid", "vi", "A", "T.float32"]
IDENTS = ["x", "vi", "vk", "A", "B", "C", "n", "T", "np", "range", "int", "float", "True", "__class__",
          "float128", "int4", "T.unknown", "self", "_", "i_1"]
NUMBERS = ["0", "1", "-1", "-0", "3", "2147483648", "-2147483649", "10**30", "1e308", "0.0", "nan", "1_000",
           "0x10", "7.5"]


def _tokens(text: str) -> list[re.Match]:
    return list(TOKEN.finditer(text))


@st.composite
def mutated(draw, text: str) -> str:
    """`text` with 1-3 random mutations."""
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["delete", "insert", "duplicate", "swap", "ident", "number", "indent",
                                     "line_delete", "line_swap", "line_dup"]))
        toks = _tokens(text)
        lines = text.split("\n")
        if kind in ("indent", "line_delete", "line_swap", "line_dup"):
            at = draw(st.integers(0, len(lines) - 1))
            if kind == "indent":
                delta = draw(st.sampled_from([-4, -1, 1, 4, 8]))
                lines[at] = " " * max(0, delta) + lines[at][max(0, -delta):]
            elif kind == "line_delete":
                del lines[at]
            elif kind == "line_dup":
                lines.insert(at, lines[at])
            else:
                other = draw(st.integers(0, len(lines) - 1))
                lines[at], lines[other] = lines[other], lines[at]
            text = "\n".join(lines)
            continue
        if not toks:
            continue
        m = toks[draw(st.integers(0, len(toks) - 1))]
        if kind == "delete":
            text = text[:m.start()] + text[m.end():]
        elif kind == "insert":
            text = text[:m.start()] + draw(st.sampled_from(INSERTS)) + " " + text[m.start():]
        elif kind == "duplicate":
            text = text[:m.end()] + m.group() + text[m.end():]
        elif kind == "swap":
            later = [t for t in toks if t.start() > m.end()]
            if later:
                n = later[0]
                text = text[:m.start()] + n.group() + text[m.end():n.start()] + m.group() + text[n.end():]
        elif kind == "ident":
            names = [t for t in toks if t.group()[0].isalpha() or t.group()[0] == "_"]
            if names:
                n = names[draw(st.integers(0, len(names) - 1))]
                text = text[:n.start()] + draw(st.sampled_from(IDENTS)) + text[n.end():]
        else:
            nums = [t for t in toks if t.group()[0].isdigit()]
            if nums:
                n = nums[draw(st.integers(0, len(nums) - 1))]
                text = text[:n.start()] + draw(st.sampled_from(NUMBERS)) + text[n.end():]
    return text


def check_parse(text: str) -> None:
    """ScriptError (with a line) or a function that round-trips; nothing else."""
    try:
        func = tdsl.parse(text)
    except tdsl.ScriptError as err:
        assert err.lineno is not None, f"ScriptError without a line: {err}"
        assert str(err).strip()
        return
    assert_roundtrip(func)


@fuzz_settings(500)
@given(data=st.data(), index=st.integers(0, len(SOURCES) - 1))
def test_mutated_corpus_scripts(data, index):
    check_parse(data.draw(mutated(SOURCES[index]), label="mutated"))


@fuzz_settings(150)
@given(data=st.data(), prog=programs(max_stages=2))
def test_mutated_generated_programs(data, prog):
    check_parse(data.draw(mutated(prog.text), label="mutated"))


@fuzz_settings(100)
@given(prog=programs())
def test_generated_programs_parse_and_roundtrip(prog):
    func = tdsl.parse(prog.text)
    assert_roundtrip(func)


@fuzz_settings(100)
@given(words=st.lists(st.sampled_from(INSERTS + IDENTS + NUMBERS + ["\n", "\n    ", "\n        "]), max_size=25))
def test_random_token_soup(words):
    check_parse("@T.prim_func\ndef f(A: T.Buffer((4,), \"float32\")):\n    " + " ".join(words))
