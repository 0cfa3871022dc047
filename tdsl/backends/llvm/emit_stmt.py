"""The LLVM emitter's statements: sequences (split into calls when huge), lets, ifs, stores,
allocations, serial and parallel loops (a part of `codegen._Emitter`)."""
from __future__ import annotations

from typing import cast

from llvmlite import ir

from ...errors import TargetError
from ...ir import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    SeqStmt,
    Var,
)
from ...script.printer import message_text as expr_text
from .abi import ERR_INTERRUPTED, ERR_NOMEM, ERR_TOO_MANY
from .emit_base import (
    ENTRY_ATTRIBUTES,
    STACK_LIMIT,
    EmitterBase,
    _fold_index,
    _int32_addressed,
    _used_vars_and_buffers,
    _widened,
)
from .lltypes import I8, I32, I64, PTR, _Callee, _const, _gep, _size_of, memtype
from .split import UNROLL_LIMIT, groups


class StatementEmitter(EmitterBase):
    # -- statements ------------------------------------------------------------------------
    def stmt(self, s) -> None:
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            if isinstance(s, (Block, BlockRealize)):
                raise TargetError(f"the CPU code generator takes lowered IR, but found block "
                                  f"{getattr(s, 'name', None) or cast(BlockRealize, s).block.name!r}: call tdsl.lower first")
            raise TargetError(f"the CPU code generator cannot compile a {type(s).__name__} statement")
        method(s)

    def s_SeqStmt(self, s: SeqStmt) -> None:
        limit = self.m.split_size
        # only straight-line code runs once per call: a sequence inside a loop is never split
        if limit is None or self.loop_depth or self.in_parallel or len(s.seq) < 2 or self.m.sizes(s) <= limit:
            for x in s.seq:
                self.stmt(x)
            return
        for outline, run in groups(s.seq, self.m.sizes, limit):
            if outline:
                self.outlined_call(run[0] if len(run) == 1 else SeqStmt(tuple(run)))
            else:
                for x in run:
                    self.stmt(x)

    def outlined_call(self, s) -> None:
        """Emit `s` as an internal noinline function and call it here (a huge body cut into
        LLVM functions of bounded size, see split.py): the buffers (pointer and extent) and
        variables in scope that `s` uses are its arguments; its return code, when not 0 (a
        failed bounds check, out of memory), is returned from here too."""
        m = self.m
        k = m.n_parts
        m.n_parts += 1
        used_vars, used_bufs = _used_vars_and_buffers(s)
        vars_ = [v for v in used_vars if v in self.env or v in self.wide]
        bufs = [b for b in used_bufs if b in self.bufs]
        var_vals = [self.wide[v] if v in self.wide else self.env[v] for v in vars_]
        arg_tys = [PTR] * len(bufs) + [I64] * len(bufs) + [v.type for v in var_vals]
        part = ir.Function(m.module, ir.FunctionType(I32, arg_tys), f"{m.symbol}_part{k}")
        part.linkage = "internal"
        part.attributes.add("noinline")   # called once: the inliner would undo the split
        part.attributes.add("nounwind")
        for a in part.args[:len(bufs)]:
            a.add_attribute("noalias")
        sub = type(self)(m, part, in_parallel=self.in_parallel)
        for i, b in enumerate(bufs):
            sub.bufs[b] = (part.args[i], part.args[len(bufs) + i])
        for i, v in enumerate(vars_):
            (sub.wide if v in self.wide else sub.env)[v] = part.args[2 * len(bufs) + i]
            if v in self.wide_range:
                sub.wide_range[v] = self.wide_range[v]
        sub.stmt(s)
        sub.finish()
        args = [self.bufs[b][0] for b in bufs] + [self.bufs[b][1] for b in bufs] + var_vals
        rc = self.b.call(part, args)
        self.fail_if(self.b.icmp_signed("!=", rc, ir.Constant(I32, 0)), rc)

    def s_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, (IntImm, FloatImm)):
            return
        self.expr(s.value)

    def s_LetStmt(self, s: LetStmt) -> None:
        self.env[s.var] = self.expr(s.value)
        self.stmt(s.body)
        del self.env[s.var]

    def s_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.expr(s.condition)
        if isinstance(cond.type, ir.VectorType):
            raise TargetError(f"an if statement needs a scalar condition, not {expr_text(s.condition)}")
        if s.else_case is None:
            with self.b.if_then(cond):
                self.stmt(s.then_case)
        else:
            with self.b.if_else(cond) as (then, otherwise):
                with then:
                    self.stmt(s.then_case)
                with otherwise:
                    self.stmt(s.else_case)

    def s_BufferStore(self, s: BufferStore) -> None:
        value = self.expr(s.value)
        self.store(s.buffer, s.indices, value, s.value.dtype)

    def s_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        count = self.extent_of(buf)
        size_bytes = None
        if isinstance(count, ir.Constant):
            size_bytes = int(count.constant) * buf.dtype.itemsize * max(buf.dtype.lanes, 1)
        elem = memtype(buf.dtype)
        if size_bytes is not None and (size_bytes <= STACK_LIMIT or (buf.scope == "local" and size_bytes <= 1 << 20)):
            ptr = self.alloca(elem, max(int(count.constant), 1))
            self.bufs[buf] = (ptr, count)
            self.stmt(s.body)
            del self.bufs[buf]
            return
        wrapped = None
        if not isinstance(count, ir.Constant):
            count, wrapped = self.checked_count(buf)
        if _int32_addressed(buf.shape[0]):
            # an int32-indexed buffer of symbolic shape: its true (int64) count must fit int32
            too_many = self.b.icmp_unsigned(">", count, ir.Constant(I64, 2**31 - 1))
            self.fail_if(too_many if wrapped is None else self.b.or_(too_many, wrapped), ERR_TOO_MANY)
        elif wrapped is not None:
            self.fail_if(wrapped, ERR_NOMEM)
        # a count past 2**56 elements is no allocation any machine makes (and its bytes could wrap)
        self.fail_if(self.b.icmp_unsigned(">", count, ir.Constant(I64, 2**56)), ERR_NOMEM)
        nbytes = self.b.mul(count, ir.Constant(I64, buf.dtype.itemsize * buf.dtype.lanes))
        rounded = self.b.and_(self.b.add(nbytes, ir.Constant(I64, 127)), ir.Constant(I64, -64))
        aligned_alloc = self.m.intrinsic("aligned_alloc", PTR, [I64, I64])
        ptr = self.b.call(aligned_alloc, [ir.Constant(I64, 64), rounded])
        self.fail_if(self.b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), ERR_NOMEM)
        self.heap.append(ptr)
        self.bufs[buf] = (ptr, count)
        self.stmt(s.body)
        del self.bufs[buf]
        self.heap.pop()
        if not self.b.block.is_terminated:
            self.b.call(self.m.intrinsic("free", ir.VoidType(), [PTR]), [ptr])

    def s_For(self, s: For) -> None:
        self.loop_depth += 1
        try:
            self._for(s)
        finally:
            self.loop_depth -= 1

    def _for(self, s: For) -> None:
        if s.kind == "parallel" and not self.in_parallel:
            self.parallel_for(s)
            return
        if s.kind == "unrolled" and isinstance(s.extent, IntImm) and s.extent.value <= UNROLL_LIMIT:
            widen = _widened(s.loop_var)
            lo = self.index(s.min) if widen else self.expr(s.min)
            for k in range(s.extent.value):
                self._bind_loop_var(s.loop_var, self._add_index(lo, k) if widen else
                                    self.b.add(lo, _const(lo.type, k)) if k else lo, widen)
                self.stmt(s.body)
            self._unbind_loop_var(s.loop_var)
            return
        if _widened(s.loop_var):
            lo = self.index(s.min)
            hi = self._add_index(lo, self.index(s.extent))
        else:
            lo = self.expr(s.min)
            hi = self.b.add(lo, self.expr(s.extent))
        self.serial_loop(s.loop_var, lo, hi, s.body)

    def serial_loop(self, var: Var, lo: ir.Value, hi: ir.Value, body) -> None:
        """`for var in [lo, hi)`; lo and hi are i64 for a widened variable (see `_widened`)."""
        widen = _widened(var)
        pre = self.b.block
        head = self.fn.append_basic_block(f"for_{var.name}")
        loop = self.fn.append_basic_block(f"for_{var.name}_body")
        end = self.fn.append_basic_block(f"for_{var.name}_end")
        signed = not var.dtype.is_uint
        cmp = self.b.icmp_signed if signed else self.b.icmp_unsigned
        self.b.cbranch(cmp("<", lo, hi), head, end)
        self.b.position_at_end(head)
        phi = self.b.phi(lo.type, name=var.name)
        phi.add_incoming(lo, pre)
        self.b.branch(loop)
        self.b.position_at_end(loop)
        self._bind_loop_var(var, phi, widen)
        if widen and isinstance(lo, ir.Constant) and isinstance(hi, ir.Constant):
            self.wide_range[var] = (lo.constant, hi.constant - 1)
        self.stmt(body)
        self._unbind_loop_var(var)
        # phi < hi, so phi + 1 <= hi cannot overflow: nsw lets LLVM keep the variable in i64
        nxt = self.b.add(phi, _const(lo.type, 1), flags=("nsw",) if signed else ())
        phi.add_incoming(nxt, self.b.block)
        self.b.cbranch(cmp("<", nxt, hi), head, end)
        self.b.position_at_end(end)

    def _add_index(self, a: ir.Value, c: ir.Value | int) -> ir.Value:
        """a + c for i64 index values (c may be a Python int), folded when it can be."""
        c = ir.Constant(I64, c) if isinstance(c, int) else c
        folded = _fold_index("add", a, c)
        return folded if folded is not None else self.b.add(a, c, flags=self.nsw)

    def _bind_loop_var(self, var: Var, value: ir.Value, widened: bool) -> None:
        """A widened variable's i64 value serves indices; a use as a value truncates it there."""
        (self.wide if widened else self.env)[var] = value

    def _unbind_loop_var(self, var: Var) -> None:
        self.env.pop(var, None)
        self.wide.pop(var, None)
        self.wide_range.pop(var, None)

    # -- parallel loops --------------------------------------------------------------------
    def parallel_for(self, s: For) -> None:
        """Outline the loop body into (lo, hi, closure) and run it on the thread pool."""
        m = self.m
        m.parallel = True
        k = m.n_outlined
        m.n_outlined += 1
        used_vars, used_bufs = _used_vars_and_buffers(s)
        vars_ = [v for v in used_vars if (v in self.env or v in self.wide) and v is not s.loop_var]
        bufs = [b for b in used_bufs if b in self.bufs]
        var_vals = [self.wide[v] if v in self.wide else self.env[v] for v in vars_]
        # body(lo, hi, ptr noalias bufs..., i64 extents..., captured vars...) -> i32
        arg_tys = [I64, I64] + [PTR] * len(bufs) + [I64] * len(bufs) + [v.type for v in var_vals]
        body_fn = ir.Function(m.module, ir.FunctionType(I32, arg_tys), f"{m.symbol}_par{k}_body")
        body_fn.linkage = "internal"
        for a in body_fn.args[2:2 + len(bufs)]:
            a.add_attribute("noalias")
        sub = type(self)(m, body_fn, in_parallel=True)
        args = body_fn.args
        for i, b in enumerate(bufs):
            sub.bufs[b] = (args[2 + i], args[2 + len(bufs) + i])
        for i, v in enumerate(vars_):
            (sub.wide if v in self.wide else sub.env)[v] = args[2 + 2 * len(bufs) + i]
            if v in self.wide_range:
                sub.wide_range[v] = self.wide_range[v]
        if isinstance(s.min, IntImm) and isinstance(s.extent, IntImm):
            sub.wide_range[s.loop_var] = (s.min.value, s.min.value + s.extent.value - 1)
        if _widened(s.loop_var):
            start = sub.index(s.min)
            lo, hi = sub._add_index(args[0], start), sub._add_index(args[1], start)
        else:
            lo = sub.b.add(sub.cast_int(args[0], s.loop_var.dtype), sub.expr(s.min))
            hi = sub.b.add(sub.cast_int(args[1], s.loop_var.dtype), sub.expr(s.min))
        sub.serial_loop(s.loop_var, lo, hi, s.body)
        sub.finish()

        # closure: one 64-byte slot per value (slot 0: the error code), addressed by byte offset
        values = [ir.Constant(I32, 0)] + [self.bufs[b][0] for b in bufs] + [self.bufs[b][1] for b in bufs] + var_vals
        offsets, total = [], 0
        for v in values:
            offsets.append(total)
            total += -(-_size_of(v.type) // 64) * 64
        tramp = ir.Function(m.module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR]), f"{m.symbol}_par{k}")
        tramp.linkage = "internal"
        if m.wrappers_optnone:   # a few loads and a call, once per chunk: nothing to optimise
            for attr in ENTRY_ATTRIBUTES:
                tramp.attributes.add(attr)
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        cl = tramp.args[2]
        fields = [tb.load(_gep(tb, cl, [ir.Constant(I64, off)], I8), typ=v.type)
                  for off, v in zip(offsets[1:], values[1:])]
        rc = tb.call(body_fn, [tramp.args[0], tramp.args[1]] + fields)
        with tb.if_then(tb.icmp_signed("!=", rc, ir.Constant(I32, 0))):
            tb.cmpxchg(cl, ir.Constant(I32, 0), rc, "monotonic", "monotonic")
        tb.ret_void()

        slot = self.alloca(I8, total)
        for off, v in zip(offsets, values):
            self.b.store(v, _gep(self.b, slot, [ir.Constant(I64, off)], I8))
        launch_addr = self.b.load(_gep(self.b, m.ctx, [ir.Constant(I64, 0)], I64), typ=I64)
        launch = _Callee(self.b.block, launch_addr, ir.FunctionType(I32, [PTR, PTR, I64]))
        self.b._insert(launch)
        extent = self.index(s.extent)
        stopped = self.b.call(launch, [tramp, slot, extent])   # 1: Ctrl-C stopped the loop (runtime.py)
        self.fail_if(self.b.icmp_signed("!=", stopped, ir.Constant(I32, 0)), ERR_INTERRUPTED)
        err = self.b.load(slot, typ=I32)
        self.fail_if(self.b.icmp_signed("!=", err, ir.Constant(I32, 0)), err)
