"""The Schedule facade by family: `methods/<family>.py` holds the methods whose pure primitives
are in `primitives/<family>.py` (and whose tests are `tests/schedule/test_<family>.py`), each
family one class on `ScheduleBase`; `tdsl.schedule.Schedule` joins them."""
