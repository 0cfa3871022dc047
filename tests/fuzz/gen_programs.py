"""Hypothesis generators of random, well-typed tdsl programs, as script text.

A program is a pipeline of 1-3 stages over a (D0, D1) domain. Each stage is one block that
writes either a fresh intermediate buffer (`T.alloc_buffer` at the top of the function) or the
output, and reads the inputs and the earlier stages:

* `map2`   - elementwise over (D0, D1), writes a 2-d buffer;
* `reduce` - a sum or max over D1 with `T.init()`, writes a 1-d buffer of D0;
* `map1`   - elementwise over D0, writes a 1-d buffer.

Bodies mix loads (some reversed, some broadcast), constants, a scalar parameter, `T.max`,
`T.min`, `T.Select`, `T.if_then_else`, floor division/modulo by constants, casts from narrow
input dtypes, `let` bindings and if/else. Loop nests are plain grids, nests with explicit loop
kinds, or split nests guarded by `T.where`. D0 may be the symbolic dimension `n`.

Inputs are small integers (also in float buffers) so that float arithmetic is exact in any
evaluation order, which lets schedules and backends be compared almost exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

COMPUTE_DTYPES = ("int8", "int32", "float16", "float32", "float64")
# a narrower input dtype the stage casts from, per compute dtype
NARROW = {"int32": "int8", "float32": "float16", "float64": "float32"}


@dataclass
class Program:
    """A generated program: its script, its parameters and how to make arguments for it."""

    text: str
    dtype: str                      # compute dtype (intermediates and output)
    params: list[tuple[str, str, tuple]]  # (name, dtype, shape) of buffer params; shape entries int or "n"
    scalar: tuple[str, str] | None  # (name, dtype)
    output: str
    blocks: list[str]
    symbolic: bool
    d0: int
    d1: int
    notes: list[str] = field(default_factory=list)

    def args(self, rng: np.random.Generator, n: int | None = None) -> list:
        """Arguments in parameter order; the output is zero-filled; `n` binds the symbolic dim."""
        out = []
        for name, dtype, shape in self.params:
            concrete = tuple((n if n is not None else self.d0) if s == "n" else s for s in shape)
            if name == self.output:
                out.append(np.zeros(concrete, dtype))
            else:
                out.append(rng.integers(-4, 5, concrete).astype(dtype))
        if self.scalar is not None:
            value = int(rng.integers(-3, 4))
            out.append(float(value) if self.scalar[1].startswith("float") else value)
        return out

    @property
    def output_index(self) -> int:
        return [p[0] for p in self.params].index(self.output)

    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) for comparing two evaluations of this program."""
        return {"float16": (2e-2, 1e-1), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}.get(self.dtype, (0, 0))


def const(dtype: str, value: int) -> str:
    """A typed constant in script form."""
    if dtype == "int32":
        return str(value)
    return f"T.{dtype}({value})"


@dataclass
class _Ctx:
    """What a stage body may read: expressions of the compute dtype at the current indices."""

    dtype: str
    leaves: list[str]
    index_vars: list[str]


@st.composite
def expr(draw, ctx: _Ctx, depth: int = 2) -> str:
    """A random expression of ctx.dtype over the ctx leaves."""
    dt = ctx.dtype
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(ctx.leaves))
    kind = draw(st.sampled_from(["bin", "bin", "const", "minmax", "select", "ite", "intop", "neg"]))
    a = draw(expr(ctx, depth - 1))
    if kind == "bin":
        b = draw(expr(ctx, depth - 1))
        return f"({a} {draw(st.sampled_from(['+', '-', '*']))} {b})"
    if kind == "const":
        return f"({a} {draw(st.sampled_from(['+', '-', '*']))} {const(dt, draw(st.integers(-3, 3)))})"
    if kind == "minmax":
        b = draw(expr(ctx, depth - 1))
        return f"T.{draw(st.sampled_from(['max', 'min']))}({a}, {b})"
    if kind in ("select", "ite"):
        b = draw(expr(ctx, depth - 1))
        cond = draw(condition(ctx))
        fn = "T.Select" if kind == "select" else "T.if_then_else"
        return f"{fn}({cond}, {a}, {b})"
    if kind == "intop" and dt.startswith("int"):
        op = draw(st.sampled_from(["//", "%"]))
        return f"({a} {op} {const(dt, draw(st.integers(1, 5)))})"
    if kind == "neg" and dt.startswith("float"):
        return f"T.abs({a})"
    return f"({a} + {const(dt, 1)})"


@st.composite
def condition(draw, ctx: _Ctx) -> str:
    """A bool condition over the leaves or the block iterators."""
    if draw(st.booleans()):
        v = draw(st.sampled_from(ctx.index_vars))
        return f"{v} % 2 == {draw(st.integers(0, 1))}" if draw(st.booleans()) else f"{v} < {draw(st.integers(1, 4))}"
    a, b = draw(st.sampled_from(ctx.leaves)), draw(st.sampled_from(ctx.leaves))
    return f"{a} {draw(st.sampled_from(['<', '<=', '>', '>=', '!=']))} {b}"


def _load(name: str, dtype: str, compute: str, index: str) -> str:
    text = f"{name}[{index}]"
    return text if dtype == compute else f"T.cast({text}, \"{compute}\")"


@st.composite
def _loops(draw, spatial: list[tuple[str, str]], reduce: tuple[str, str] | None, d0_const: bool):
    """Loop header lines, iterator declarations and predicate for one block.

    `spatial` are (iterator, extent text) pairs; `reduce` the reduction (iterator, extent).
    Returns (loop lines, declaration lines)."""
    axes = list(spatial) + ([reduce] if reduce else [])
    kinds = "S" * len(spatial) + ("R" if reduce else "")
    loop_names = [v[1:] for v, _ in axes]  # vi -> i
    style = draw(st.sampled_from(["grid", "grid", "kinds", "split", "reduce_outer"]))
    if style == "reduce_outer" and reduce is not None and len(axes) > 1:
        order = [len(axes) - 1] + list(range(len(axes) - 1))
        names = [loop_names[o] for o in order]
        exts = [axes[o][1] for o in order]
        lines = [f"for {', '.join(names)} in T.grid({', '.join(exts)}):"]
        decl = [(f"{', '.join(axes[o][0] for o in order)} = T.axis.remap(\"{''.join(kinds[o] for o in order)}\", "
                 f"[{', '.join(names)}])")]
        return lines, decl
    if style == "kinds":
        lines = []
        for name, (_, ext) in zip(loop_names, axes):
            kind = draw(st.sampled_from(["range", "T.serial", "T.parallel", "T.unroll", "T.vectorized"]))
            if kind == "T.parallel" and reduce is not None and name == loop_names[-1]:
                kind = "T.serial"  # a parallel reduction loop is a race; the generator writes valid code
            lines.append(f"for {name} in {kind}({ext}):")
        decl = [f"{', '.join(v for v, _ in axes)} = T.axis.remap(\"{kinds}\", [{', '.join(loop_names)}])"]
        return lines, decl
    if style == "split":
        factor = draw(st.integers(2, 4))
        first_var, first_ext = axes[0]
        outer = f"({first_ext} + {factor - 1}) // {factor}" if not first_ext.isdigit() \
            else str(-(-int(first_ext) // factor))
        names = [loop_names[0] + "o", loop_names[0] + "i"] + loop_names[1:]
        exts = [outer, str(factor)] + [e for _, e in axes[1:]]
        lines = [f"for {', '.join(names)} in T.grid({', '.join(exts)}):"]
        bound = f"{names[0]} * {factor} + {names[1]}"
        decl = [f"{first_var} = T.axis.spatial({first_ext}, {bound})"]
        if len(axes) > 1:
            decl.append(f"{', '.join(v for v, _ in axes[1:])} = T.axis.remap(\"{kinds[1:]}\", [{', '.join(names[2:])}])")
        decl.append(f"T.where({bound} < {first_ext})")
        return lines, decl
    lines = [f"for {', '.join(loop_names)} in T.grid({', '.join(e for _, e in axes)}):"]
    decl = [f"{', '.join(v for v, _ in axes)} = T.axis.remap(\"{kinds}\", [{', '.join(loop_names)}])"]
    return lines, decl


@st.composite
def _body(draw, target: str, index: str, ctx: _Ctx) -> list[str]:
    """The statements of an elementwise block: a store, a let then a store, or if/else."""
    style = draw(st.sampled_from(["store", "let", "if"]))
    if style == "let":
        value = draw(expr(ctx, 2))
        inner = _Ctx(ctx.dtype, ctx.leaves + ["t"], ctx.index_vars)
        return [f"t = {value}", f"{target}[{index}] = {draw(expr(inner, 1))}"]
    if style == "if":
        cond = draw(condition(ctx))
        return [f"if {cond}:", f"    {target}[{index}] = {draw(expr(ctx, 2))}", "else:",
                f"    {target}[{index}] = {draw(expr(ctx, 1))}"]
    return [f"{target}[{index}] = {draw(expr(ctx, 3))}"]


@st.composite
def programs(draw, max_stages: int = 3, dtypes: tuple[str, ...] = COMPUTE_DTYPES) -> Program:
    """A random well-typed tdsl program (see the module docstring)."""
    dt = draw(st.sampled_from(dtypes))
    symbolic = draw(st.integers(0, 3)) == 0
    d0, d1 = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    e0, e1 = ("n" if symbolic else str(d0)), str(d1)
    in_dt = NARROW.get(dt, dt) if draw(st.booleans()) else dt
    params: list[tuple[str, str, tuple]] = [("A", in_dt, ("n" if symbolic else d0, d1))]
    if draw(st.booleans()):
        params.append(("B", dt, (d1,)))
    scalar = ("alpha", dt) if draw(st.booleans()) else None
    n_stages = draw(st.integers(1, max_stages))
    kinds = [draw(st.sampled_from(["map2", "map2", "reduce", "map1"])) for _ in range(n_stages)]
    ranks: dict[str, int] = {}  # stage buffers so far -> rank
    allocs, body, blocks = [], [], []
    for s, kind in enumerate(kinds):
        last = s == n_stages - 1
        rank = 2 if kind == "map2" else 1
        target = "Out" if last else f"S{s}"
        name = f"s{s}_{kind}"
        blocks.append(name)
        shape_text = f"({e0}, {e1})" if rank == 2 else f"({e0},)"
        if last:
            params.append(("Out", dt, ("n" if symbolic else d0, d1) if rank == 2 else ("n" if symbolic else d0,)))
        else:
            allocs.append(f"{target} = T.alloc_buffer({shape_text}, \"{dt}\")")
        if kind == "map2":
            idx2, idx1 = "vi, vj", "vi"
            leaves = [_load("A", in_dt, dt, "vi, vj")]
            if d1 > 1:
                leaves.append(_load("A", in_dt, dt, f"vi, {d1 - 1} - vj"))
            iv = ["vi", "vj"]
        elif kind == "reduce":
            idx2, idx1 = "vi, vk", "vi"
            leaves = [_load("A", in_dt, dt, "vi, vk")]
            iv = ["vi", "vk"]
        else:
            idx2, idx1 = f"vi, {draw(st.integers(0, d1 - 1))}", "vi"
            leaves = [_load("A", in_dt, dt, idx2)]
            iv = ["vi"]
        if any(p[0] == "B" for p in params) and kind != "map1":
            leaves.append(f"B[{'vj' if kind == 'map2' else 'vk'}]")
        for prev, r in ranks.items():
            leaves.append(f"{prev}[{idx2 if r == 2 else idx1}]")
        if scalar is not None:
            leaves.append("alpha")
        ctx = _Ctx(dt, leaves, iv)
        spatial = [("vi", e0), ("vj", e1)] if kind == "map2" else [("vi", e0)]
        red = ("vk", e1) if kind == "reduce" else None
        loop_lines, decl = draw(_loops(spatial, red, not symbolic))
        if kind == "reduce":
            combine = draw(st.sampled_from(["sum", "sumaug", "max"]))
            init = const(dt, 0) if combine != "max" else f"T.min_value(\"{dt}\")"
            value = draw(expr(ctx, 2))
            update = {"sum": f"{target}[vi] = {target}[vi] + {value}", "sumaug": f"{target}[vi] += {value}",
                      "max": f"{target}[vi] = T.max({target}[vi], {value})"}[combine]
            stmts = ["with T.init():", f"    {target}[vi] = {init}", update]
        else:
            stmts = draw(_body(target, "vi, vj" if rank == 2 else "vi", ctx))
        block = [f"with T.block(\"{name}\"):"] + ["    " + d for d in decl] + ["    " + x for x in stmts]
        nest = []
        for depth, line in enumerate(loop_lines):
            nest.append("    " * depth + line)
        indent = "    " * len(loop_lines)
        nest += [indent + x for x in block]
        body += nest
        ranks[target] = rank
    sig = []
    for pname, pdt, shape in params:
        dims = ", ".join(f"\"{d}\"" if d == "n" else str(d) for d in shape)
        sig.append(f"{pname}: T.Buffer(({dims}{',' if len(shape) == 1 else ''}), \"{pdt}\")")
    if scalar is not None:
        sig.append(f"{scalar[0]}: T.{scalar[1]}")
    lines = ["@T.prim_func", f"def fuzz({', '.join(sig)}):"] + ["    " + a for a in allocs] + ["    " + b for b in body]
    return Program("\n".join(lines) + "\n", dt, params, scalar, "Out", blocks, symbolic, d0, d1)

