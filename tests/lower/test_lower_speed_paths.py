"""The fast paths of lowering give exactly the IR of the slow paths they replace.

Each fast path (one analyzer per simplify pass, the relaxer's memo, the one-walk rescoping of
`storage`, statement-only walks, per-class dispatch and child-field tables of the IR functor)
is switched back to a straightforward reference here, and the lowered functions of the corpus
and of the bench schedules must be structurally equal both ways.
"""
import dataclasses
import pathlib
import sys

import pytest
from corpus import CORPUS

import tdsl
from tdsl.arith.analyzer import Analyzer
from tdsl.arith.relax import Relaxer
from tdsl.dtypes import float32, int32, int64
from tdsl.ir import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    For,
    IntImm,
    IRMutator,
    IRVisitor,
    LetStmt,
    Node,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    collect,
    node_fields,
    post_order_visit,
)
from tdsl.lower import simplify as simplify_pass
from tdsl.lower._util import collect_stmts

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import schedules

# the package's attributes `simplify` and `storage` are the pass functions: take the modules
simplify_mod = sys.modules["tdsl.lower.simplify"]
storage_mod = sys.modules["tdsl.lower.storage"]


def _bench_funcs() -> list[tuple[str, PrimFunc]]:
    return [("gemm64", schedules.gemm_schedule(64).func),
            ("gemm48x32x40", schedules.gemm_schedule(48, 32, 40).func),
            ("gemm_unpacked", schedules.gemm_schedule(32, 64, 48, tiles=(4, 16, 16, 16), nc=32, pack_a=False,
                                                      pack_c=False, pack_b=False).func),
            ("softmax", schedules.softmax_schedule(8, 64).func),
            ("softmax_no_stream", schedules.softmax_schedule(16, 128, stream=False).func),
            ("layernorm", schedules.layernorm_schedule(8, 64).func),
            ("conv2d", schedules.conv2d_schedule(1, 16, 5, 16, 6, mr=2).func),
            ("conv2d_batch", schedules.conv2d_schedule(2, 8, 4, 16, 4).func)]


FUNCS = [(case.name, case.func) for case in CORPUS] + _bench_funcs()
IDS = [name for name, _ in FUNCS]


# ------------------------------------------------------------------ reference (slow) paths

class _PerScopeSimplifier(IRMutator):
    """The simplify pass as it was: a fresh analyzer for every loop scope."""

    def __init__(self):
        self.ranges: dict[Var, Range] = {}
        self.scoped = None

    def visit(self, node):
        if isinstance(node, PrimExpr) and node.dtype.lanes == 1 and (node.dtype.is_integer or node.dtype.is_bool):
            if self.scoped is None:
                self.scoped = Analyzer(dict(self.ranges))
            return self.scoped.simplify(node)
        return super().visit(node)

    def visit_For(self, loop: For) -> Stmt:
        lo, ext = self.visit(loop.min), self.visit(loop.extent)
        outer, self.scoped = self.scoped, None
        saved = self.ranges.get(loop.loop_var)
        self.ranges[loop.loop_var] = Range(lo, ext)
        body = self.visit(loop.body)
        if saved is None:
            del self.ranges[loop.loop_var]
        else:
            self.ranges[loop.loop_var] = saved
        self.scoped = outer
        if lo is loop.min and ext is loop.extent and body is loop.body:
            return loop
        return dataclasses.replace(loop, min=lo, extent=ext, body=body)

    def visit_LetStmt(self, op: LetStmt) -> Stmt:
        value, body = self.visit(op.value), self.visit(op.body)
        return op if value is op.value and body is op.body else dataclasses.replace(op, value=value, body=body)


def _unmemoized_relax(self: Relaxer, e: PrimExpr):
    """Relaxer._relax without its memo."""
    if not self._depends(e):
        return e, e
    return self._relax_uncached(e)


def _slow_simplify(func: PrimFunc) -> PrimFunc:
    return func.with_body(_PerScopeSimplifier().visit(func.body))


class _ReflectiveVisitor:
    """Post-order walk over every dataclass field (node_fields), as the functor once did."""

    def __init__(self):
        self.seen: list = []

    def walk(self, node) -> None:
        for name in node_fields(type(node)):
            self._value(getattr(node, name))
        self.seen.append(node)

    def _value(self, value) -> None:
        if isinstance(value, Buffer):
            return
        if isinstance(value, Node):
            self.walk(value)
        elif isinstance(value, tuple):
            for item in value:
                self._value(item)


class _ReflectiveMutator:
    """dataclasses.replace over every field: what IRMutator.generic_visit must equal."""

    def __init__(self, fn):
        self.fn = fn

    def visit(self, node):
        changes = {}
        for name in node_fields(type(node)):
            old = getattr(node, name)
            new = self._value(old)
            if new is not old:
                changes[name] = new
        node = dataclasses.replace(node, **changes) if changes else node
        return self.fn(node)

    def _value(self, value):
        if isinstance(value, Buffer):
            return value
        if isinstance(value, Node):
            return self.visit(value)
        if isinstance(value, tuple):
            new = tuple(self._value(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value


def _bump(node):
    """Every int32 constant + 1 (a change deep in every tree)."""
    if type(node) is IntImm and node.dtype == int32:
        return IntImm(node.value + 1, node.dtype, span=node.span)
    return node


class _Bumper(IRMutator):
    def visit_IntImm(self, node):
        return _bump(node)


def _stages(func: PrimFunc) -> dict[str, PrimFunc]:
    """The input of each pass (first occurrence) of the CPU pipeline."""
    out = {}
    for (_, before), (name, _) in zip(tdsl.lower.stages(func), tdsl.lower.stages(func)[1:]):
        out.setdefault(name, before)
    return out


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("name,func", FUNCS, ids=IDS)
def test_lowering_equals_the_slow_paths(name, func, monkeypatch):
    fast = tdsl.lower(func)
    monkeypatch.setattr(simplify_mod, "_Simplifier", lambda make_analyzer: _PerScopeSimplifier())
    monkeypatch.setattr(Relaxer, "_relax", _unmemoized_relax)
    monkeypatch.setattr(storage_mod, "_rescope", storage_mod._rescope_each)
    slow = tdsl.lower(func)
    tdsl.assert_structural_equal(fast, slow)
    assert fast.script() == slow.script()


@pytest.mark.parametrize("name,func", FUNCS, ids=IDS)
def test_simplify_pass_equals_per_scope_simplification(name, func):
    stages = [f for n, f in tdsl.lower.stages(func) if n != "input"]
    for stage in stages:
        tdsl.assert_structural_equal(simplify_pass(stage), _slow_simplify(stage))


def _loop(var, extent, body, lo=0):
    return For(var, IntImm(lo), IntImm(extent), "serial", body)


def _store(buf, index):
    return BufferStore(buf, IntImm(0, buf.dtype), (index,))


def test_simplify_restarts_when_a_var_is_bound_again():
    """Two loops over one Var, with different ranges: each scope sees its own range."""
    i = Var("i")
    buf = Buffer("B", (IntImm(64),), int32)
    first = _loop(i, 4, _store(buf, i // 4))        # 0 here
    second = _loop(i, 64, _store(buf, i // 4), 8)   # not 0 there
    let = LetStmt(i, IntImm(40), _store(buf, i // 4))   # no range at all: stays i // 4
    before = _store(buf, i % 8)                        # i used before any loop binds it
    nested = _loop(i, 16, SeqStmt((_loop(i, 2, _store(buf, i // 2)), _store(buf, i // 16))))
    body = SeqStmt((before, first, second, let, _loop(i, 1, _store(buf, i + 3), 5), nested))
    func = PrimFunc("f", (buf,), body)
    fast = simplify_pass(func)
    tdsl.assert_structural_equal(fast, _slow_simplify(func))
    stores = collect(fast.body, BufferStore)
    assert isinstance(stores[1].indices[0], IntImm) and stores[1].indices[0].value == 0
    assert not isinstance(stores[2].indices[0], IntImm)
    assert stores[4].indices[0].value == 8


@pytest.mark.parametrize("name,func", FUNCS, ids=IDS)
def test_functor_walks_every_field(name, func):
    """Post-order visits and mutations through the per-class tables equal the reflective ones."""
    for stage in (func, tdsl.lower(func)):
        fast: list = []
        post_order_visit(stage.body, fast.append)
        slow = _ReflectiveVisitor()
        slow.walk(stage.body)
        assert len(fast) == len(slow.seen) and all(a is b for a, b in zip(fast, slow.seen))
        tdsl.assert_structural_equal(_Bumper().visit(stage.body), _ReflectiveMutator(_bump).visit(stage.body))


def test_dispatch_tables_are_per_class():
    class Counter(IRVisitor):
        def __init__(self):
            self.vars = 0

        def visit_Var(self, v):
            self.vars += 1

    class NoVars(Counter):
        def visit_Var(self, v):
            pass

    class Everything(IRVisitor):
        """An overridden generic_visit sees leaves too (they are not skipped)."""

        def __init__(self):
            self.count = 0

        def generic_visit(self, node):
            self.count += 1
            super().generic_visit(node)

    i = Var("i")
    e = i * 4 + i
    NoVars().visit(e)
    c = Counter()
    c.visit(e)
    assert c.vars == 2
    everything = Everything()
    everything.visit(e)
    assert everything.count == 5   # add, mul, i, 4, i


def test_mutator_keeps_spans_and_checks():
    from tdsl.errors import Span

    span = Span("f.py", 3, 1)
    i = Var("i")
    e = dataclasses.replace(i + 1, span=span)
    out = _Bumper().visit(e)
    assert out is not e and out.span is span and out.b.value == 2

    class Wrong(IRMutator):
        def visit_IntImm(self, node):
            return IntImm(node.value, int64)

    with pytest.raises(TypeError, match="differ in dtype"):
        Wrong().visit(i + 1)


@pytest.mark.parametrize("name,func", FUNCS, ids=IDS)
def test_statement_walks_find_what_full_walks_find(name, func):
    from tdsl.backends.llvm.entry import _written_buffers
    from tdsl.lower import _annotation_keys

    for cls in (Block, BlockRealize, For, Allocate):
        assert collect_stmts(func.body, cls) == collect(func.body, cls)
    keys = set()
    post_order_visit(func.body, lambda n: keys.update(k for k, _ in n.annotations) if isinstance(n, Block) else None)
    assert _annotation_keys(func) == keys
    lowered = tdsl.lower(func)
    assert _written_buffers(lowered) == {s.buffer for s in collect(lowered.body, BufferStore)}


@pytest.mark.parametrize("name,func", FUNCS, ids=IDS)
def test_storage_rescopes_in_one_walk_as_one_by_one(name, func):
    stage = _stages(func)["storage"]
    tdsl.assert_structural_equal(storage_mod._rescope(stage.body), storage_mod._rescope_each(stage.body))


def test_storage_buffer_allocated_twice_gets_two_copies():
    big = Buffer("T", (IntImm(1 << 20),), float32, scope="local")
    body = SeqStmt((Allocate(big, _store(big, IntImm(0))), Allocate(big, _store(big, IntImm(1)))))
    out = storage_mod._rescope(body)
    first, second = out.seq[0].buffer, out.seq[1].buffer
    assert first.scope == second.scope == "global" and first is not second
    assert out.seq[0].body.buffer is first and out.seq[1].body.buffer is second


def test_flatten_still_refuses_blocks():
    with pytest.raises(ValueError, match="without blocks"):
        tdsl.lower.flatten_buffers(CORPUS[0].func)


def test_relaxer_memo_equals_fresh_relaxation():
    """Shared subexpressions relaxed once give what relaxing each afresh gives."""
    i, j = Var("i"), Var("j")
    ranges = {i: Range(IntImm(0), IntImm(8)), j: Range(i * 4, IntImm(4))}
    x = i * 16 + j
    exprs = [x // 16, x % 16, (x // 16) * 3 + x % 16, j - i * 4]
    memo = Relaxer(ranges)
    for e in exprs:
        fresh = Relaxer(ranges)
        fresh._relax = _unmemoized_relax.__get__(fresh)
        for a, b in zip(memo.relax(e), fresh.relax(e)):
            tdsl.assert_structural_equal(a, b)


def test_analyzers_sharing_keys_agree():
    i = Var("i")
    ranges = {i: Range(IntImm(0), IntImm(10))}
    keys: dict = {}
    a, b = Analyzer(ranges, keys=keys), Analyzer(ranges)
    for e in (i // 10, (i * 3 + 2) % 3, i - i, (i + 1) * 2 - 2):
        tdsl.assert_structural_equal(a.simplify(e), b.simplify(e))
    assert keys and Analyzer(keys=keys).key(i) == ("v", id(i))


def test_replace_fields_is_dataclasses_replace():
    from tdsl.errors import Span
    from tdsl.ir.functor import replace_fields

    i = Var("i")
    buf = Buffer("B", (IntImm(8),), int32)
    loop = For(i, IntImm(0), IntImm(8), "vectorized", _store(buf, i), span=Span("f.py", 2, 1))
    for changes in ({"kind": "serial"}, {"extent": IntImm(4), "body": _store(buf, IntImm(1))}, {}):
        fast, slow = replace_fields(loop, **changes), dataclasses.replace(loop, **changes)
        tdsl.assert_structural_equal(fast, slow)
        assert fast.span is slow.span and fast is not loop
    with pytest.raises(TypeError, match="no field"):
        replace_fields(loop, colour="red")
    with pytest.raises(ValueError, match="thread_tag"):
        replace_fields(loop, kind="thread_binding")
