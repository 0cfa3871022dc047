"""Fuzz tests use a private disk cache, so they neither read nor fill the user's."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TDSL_CACHE_DIR", str(tmp_path_factory.mktemp("tdsl-fuzz-cache")))
    yield
    mp.undo()


def pytest_terminal_summary(terminalreporter):
    """One line on what the schedule fuzzers ran (docs/reliability.md quotes it)."""
    import sys

    module = sys.modules.get("fuzz.gen_schedules")
    stats = getattr(module, "STEP_STATS", None)
    if not stats:
        return
    top = ", ".join(f"{k} {v}" for k, v in stats.most_common()
                    if k not in ("sequences", "applied", "refused"))
    terminalreporter.write_line(f"tdsl fuzz: {stats['sequences']} schedule sequences, {stats['applied']} steps "
                                f"applied, {stats['refused']} refused with ScheduleError ({top})")
