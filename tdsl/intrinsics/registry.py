"""The tensor intrinsic registry: `tdsl.TensorIntrin.register(name, desc, impl)`.

A tensor intrinsic is a pair of prim_funcs with the same parameter list: the description says
what is computed (a small loop nest with one block, in plain tdsl), the implementation says how
the hardware does it (vector types, `T.call_extern("float32x16", "llvm.fma.v16f32", ...)` for
LLVM intrinsics on the CPU, `T.evaluate(T.call_extern(...))` of device functions on CUDA).
Parameter buffers are views: their `strides=` and `offset=` may be names (bound to the strides
and the element offset of the matched region) or constants (the region must have them).

`sch.tensorize(loop_or_block, name)` matches a subtree against the description; lowering
swaps in the implementation where the target can run it (see
`tdsl.schedule.primitives.blockize`). Built-in intrinsics (`tdsl.intrinsics.builtins`) register
themselves the first time a name is looked up.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

from ..errors import UnknownIntrinError
from ..ir import Block, BlockRealize, Buffer, PrimExpr, PrimFunc, collect

_REGISTRY: dict[str, TensorIntrin] = {}
# families of intrinsics made on first use from their name (e.g. "x86.avx2.fp32_4x16x64")
_FACTORIES: list[tuple[re.Pattern, Callable[[re.Match], None]]] = []
_BUILTINS_LOADED = False
# name -> the names of the other forms of that intrinsic (the same computation on buffers in
# other scopes: TVM's "warp" tiles of an mma intrinsic tdsl also has with fragment scopes)
_FORMS: dict[str, list[str]] = {}

TARGET_KINDS = ("cpu", "cuda")


@dataclass(frozen=True)
class TensorIntrin:
    """A registered intrinsic: `desc` (what), `impl` (how), the target kind that runs `impl`
    ("cpu" or "cuda") and the CPU features it needs (e.g. ("avx512f",))."""

    name: str
    desc: PrimFunc
    impl: PrimFunc
    target: str = "cpu"
    features: tuple[str, ...] = ()
    doc: str = ""
    prelude: str = ""  # CUDA source the implementation's device functions need

    # registry -----------------------------------------------------------------------------
    @staticmethod
    def register(name: str, desc: PrimFunc, impl: PrimFunc, *, target: str = "cpu",
                 features: tuple[str, ...] | list[str] = (), doc: str = "", prelude: str = "",
                 override: bool = False, form_of: str | None = None) -> TensorIntrin:
        """Register `name` -> (desc, impl). `target` is the backend that can run `impl`
        ("cpu" or "cuda"); `features` the host CPU features it needs; `prelude` CUDA source (device
        functions) the implementation calls. Elsewhere the block keeps computing through `desc`.
        `form_of`: another intrinsic's name, which `sch.tensorize` then also accepts for this one
        where the code's buffers are in this one's scopes (see `forms`)."""
        if not isinstance(name, str) or not name:
            raise TypeError("TensorIntrin.register: the name must be a non-empty string")
        for role, f in (("desc", desc), ("impl", impl)):
            if not isinstance(f, PrimFunc):
                raise TypeError(f"TensorIntrin.register({name!r}): {role} must be a @T.prim_func, "
                                f"not {type(f).__name__}")
        if target not in TARGET_KINDS:
            raise ValueError(f"TensorIntrin.register({name!r}): target must be one of {TARGET_KINDS}, "
                             f"not {target!r}")
        if name in _REGISTRY and not override:
            raise ValueError(f"tensor intrinsic {name!r} is already registered (pass override=True to replace it)")
        _check_pair(name, desc, impl)
        intrin = TensorIntrin(name, desc, impl, target, tuple(features), doc, prelude)
        _REGISTRY[name] = intrin
        if form_of is not None and name not in _FORMS.setdefault(form_of, []):
            _FORMS[form_of].append(name)
        return intrin

    @staticmethod
    def forms(name: str) -> list[TensorIntrin]:
        """`name`'s intrinsic and those registered with ``form_of=name``: ``forms("mma_f16f16f32")``
        is tdsl's fragment-scope intrinsic and TVM's "warp" one (``"mma_f16f16f32.warp"``)."""
        first = TensorIntrin.get(name)
        return [first] + [_REGISTRY[n] for n in _FORMS.get(name, ()) if n in _REGISTRY]

    def scopes(self) -> set[str]:
        """The storage scopes of the description's buffers."""
        return {p.scope for p in self.desc.params if isinstance(p, Buffer)}

    @overload
    @staticmethod
    def get(name: str, allow_missing: Literal[False] = False) -> TensorIntrin: ...

    @overload
    @staticmethod
    def get(name: str, allow_missing: bool) -> TensorIntrin | None: ...

    @staticmethod
    def get(name: str, allow_missing: bool = False) -> TensorIntrin | None:
        """The intrinsic registered as `name`; a ScheduleError listing close names otherwise
        (None with `allow_missing=True`, as in TVM)."""
        _load_builtins()
        intrin = _REGISTRY.get(name)
        if intrin is None and isinstance(name, str):
            for pattern, make in _FACTORIES:
                m = pattern.fullmatch(name)
                if m is not None:
                    make(m)
                    intrin = _REGISTRY.get(name)
                    break
        if intrin is None and allow_missing:
            return None
        if intrin is None:
            raise UnknownIntrinError(unknown_message(name))
        return intrin

    @staticmethod
    def register_family(pattern: str, make: Callable[[re.Match], None]) -> None:
        """Make intrinsics on demand: when `get(name)` finds no `name` and `pattern` (a regular
        expression) matches all of it, `make(match)` is called and must register `name`."""
        _FACTORIES.append((re.compile(pattern), make))

    @staticmethod
    def list() -> list[str]:
        """The names of all registered intrinsics (built-ins included), sorted."""
        _load_builtins()
        return sorted(_REGISTRY)

    @staticmethod
    def exists(name: str) -> bool:
        _load_builtins()
        return name in _REGISTRY

    # what the matcher needs ----------------------------------------------------------------
    @property
    def desc_body(self):
        """The statement the matched subtree is compared with: the description's loop nest."""
        return _content(self.desc)

    @property
    def impl_body(self):
        """The implementation as plain code: blocks (TVM writes intrinsics with them) are
        replaced by their bodies (see `flatten_blocks`)."""
        body = _content(self.impl)
        return flatten_blocks(body) if collect(body, Block) else body

    @property
    def impl_allocs(self) -> tuple[Buffer, ...]:
        root = self.impl.root_block
        return root.alloc_buffers if root is not None else ()

    def __repr__(self) -> str:
        feats = f", features={list(self.features)}" if self.features else ""
        return f"TensorIntrin({self.name!r}, target={self.target!r}{feats})"


def _content(func: PrimFunc):
    """The body under the implicit root block (the parser wraps bodies that have blocks)."""
    root = func.root_block
    if root is not None and root.name == "root" and not root.iter_vars:
        return root.body
    return func.body


def _flattenable(stmt) -> bool:
    return all(not r.block.alloc_buffers and not collect(r.block.body, Block) for r in collect(stmt, BlockRealize))


def flatten_blocks(stmt):
    """`stmt` with every leaf block replaced by what it runs: its body with the iterators
    replaced by their bindings, under `if predicate:`, its T.init under `if` every reduction
    iterator is at the start of its domain (what the block means in TensorIR)."""
    from ..ir import TRUE, IfThenElse, IRMutator, SeqStmt, binary, logical_and, substitute

    class _Flatten(IRMutator):
        def visit_BlockRealize(self, node: BlockRealize):
            b = node.block
            vmap = {iv.var: v for iv, v in zip(b.iter_vars, node.iter_values)}
            body = substitute(b.body, vmap)
            if b.init is not None:
                first = [binary("eq", vmap[iv.var], iv.dom.min) for iv in b.iter_vars if iv.kind == "R"]
                init = substitute(b.init, vmap)
                if first:
                    cond: PrimExpr = first[0]
                    for c in first[1:]:
                        cond = logical_and(cond, c)
                    init = IfThenElse(cond, init)
                body = SeqStmt((init, body))
            if node.predicate is not TRUE:
                body = IfThenElse(node.predicate, body)
            return body

    return _Flatten().visit(stmt)


def _check_pair(name: str, desc: PrimFunc, impl: PrimFunc) -> None:
    dp, ip = desc.params, impl.params
    if len(dp) != len(ip):
        raise ValueError(f"tensor intrinsic {name!r}: desc has {len(dp)} parameters but impl has {len(ip)}")
    for k, (a, b) in enumerate(zip(dp, ip)):
        if not (isinstance(a, Buffer) and isinstance(b, Buffer)):
            raise TypeError(f"tensor intrinsic {name!r}: parameter {k} must be a buffer in both desc and impl")
        if a.dtype != b.dtype or len(a.shape) != len(b.shape):
            raise ValueError(f"tensor intrinsic {name!r}: parameter {k} is {a.dtype} {len(a.shape)}-d in desc "
                             f"but {b.dtype} {len(b.shape)}-d in impl")
        if a.scope != b.scope:
            raise ValueError(f"tensor intrinsic {name!r}: parameter {k} has scope {a.scope!r} in desc but "
                             f"{b.scope!r} in impl")
    blocks = [r for r in collect(_content(desc), BlockRealize)]
    if len(blocks) != 1:
        raise ValueError(f"tensor intrinsic {name!r}: the description must hold exactly one block "
                         f"(inside its loops), found {len(blocks)}")
    if collect(_content(impl), Block) and not _flattenable(_content(impl)):
        raise ValueError(f"tensor intrinsic {name!r}: the blocks of the implementation must be leaf blocks "
                         "without T.alloc_buffer")


def unknown_message(name: str) -> str:
    close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3, cutoff=0.5)
    msg = f"unknown tensor intrinsic {name!r}"
    if close:
        msg += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    msg += "\n  registered: " + (", ".join(sorted(_REGISTRY)) or "(none)")
    if _FACTORIES:
        msg += "\n  families (any name matching): " + ", ".join(p.pattern for p, _ in _FACTORIES)
    msg += "\n  fix: register it with tdsl.TensorIntrin.register(name, desc, impl)"
    return msg


def _load_builtins() -> None:
    """Import tdsl.intrinsics.builtins once (it registers the built-in intrinsics)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    import importlib

    importlib.import_module("tdsl.intrinsics.builtins")
