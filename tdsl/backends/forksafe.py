"""Locks that survive `os.fork` (multiprocessing's "fork" start method, process pools).

A thread of the parent that holds a lock at the fork does not exist in the child, so the child
would wait on that lock forever. `fork_safe` gives each module lock a fresh copy in the child;
`hold_across_fork` also takes the lock around the fork itself, so the fork never happens in
the middle of what it guards (used for the LLVM JIT's lock: the child's LLVM state must not be
half-way through a pass or an object load)."""
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
    if not hasattr(os, "register_at_fork"):
        return
    held: list = []

    def before() -> None:
        lock = getattr(sys.modules[module_name], attr)
        lock.acquire()
        held.append(lock)

    def after_in_parent() -> None:
        if held:
            held.pop().release()

    def after_in_child() -> None:
        held.clear()
        setattr(sys.modules[module_name], attr, factory())

    os.register_at_fork(before=before, after_in_parent=after_in_parent, after_in_child=after_in_child)
