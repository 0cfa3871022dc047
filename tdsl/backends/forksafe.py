"""Locks that survive `os.fork` (multiprocessing's "fork" start method, process pools).

A thread of the parent that holds a lock at the fork does not exist in the child, so the child
would wait on that lock forever. `fork_safe` gives each module lock a fresh copy in the child;
`hold_across_fork` also takes the lock around the fork itself, so the fork never happens in
the middle of what it guards (used for the LLVM JIT's lock: the child's LLVM state must not be
half-way through a pass or an object load; llvmlite's own lock is held with it, since
llvmlite takes it for calls outside ours too, e.g. when an object it wraps is freed).

A child forked while another thread was importing a tdsl module (tdsl imports its backends on
first use) would wait forever on that module's import lock: `forget_half_imports` drops such
half-run modules and their locks in the child, which imports them afresh.
"""
from __future__ import annotations

import os
import sys
import threading


def fork_safe(module_name: str, attr: str, factory=threading.Lock) -> None:
    """After a fork, the child's `module.attr` is a fresh `factory()` lock."""
    if not hasattr(os, "register_at_fork"):
        return

    def renew() -> None:
        setattr(sys.modules[module_name], attr, factory())

    os.register_at_fork(after_in_child=renew)


def hold_across_fork(module_name: str, attr: str, factory=threading.RLock) -> None:
    """Take `module.attr` before a fork, release it after in the parent; the child gets a fresh
    one. `factory` should make reentrant locks: a thread forking while it holds the lock then
    does not wait on itself."""
    hold_lock_across_fork(lambda: sys.modules[module_name], attr, factory)


def hold_lock_across_fork(owner, attr: str, factory=threading.RLock) -> None:
    """hold_across_fork for the lock `owner().attr` (`owner` returns the object that holds it,
    e.g. a library's lock wrapper; None: nothing to hold)."""
    if not hasattr(os, "register_at_fork"):
        return
    held: list = []

    def before() -> None:
        where = owner()
        lock = getattr(where, attr, None) if where is not None else None
        if lock is not None:
            lock.acquire()
            held.append(lock)

    def after_in_parent() -> None:
        if held:
            held.pop().release()

    def after_in_child() -> None:
        held.clear()
        where = owner()
        if where is not None and hasattr(where, attr):
            setattr(where, attr, factory())

    os.register_at_fork(before=before, after_in_parent=after_in_parent, after_in_child=after_in_child)


def forget_half_imports() -> None:
    """In a forked child: a tdsl module another thread of the parent was importing is half run
    and its import lock is held by a thread the child does not have; drop both."""
    try:
        import importlib._bootstrap as bootstrap

        locks = bootstrap._module_locks  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        return
    me = threading.get_ident()
    for name, ref in list(locks.items()):
        if not (name == "tdsl" or name.startswith("tdsl.")):
            continue
        lock = ref() if callable(ref) else ref
        owner = getattr(lock, "owner", None)
        if owner is None or owner == me:
            continue
        locks.pop(name, None)
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
            del sys.modules[name]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=forget_half_imports)
