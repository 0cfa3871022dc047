"""Schedule primitives, one module per family. Each is a pure function

    primitive(func, *identities, **options) -> (new_func, result)

where blocks are named by their name and loops by their loop Var; `result` is None, a block
name, a loop Var, or a list of them. They raise ScheduleError and never mutate anything, so
the Schedule commits only on success.
"""
