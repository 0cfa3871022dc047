"""The tuning database: one SQLite file (stdlib sqlite3), shared by processes and sessions.

Four tables: `workloads` (one row per function x target x machine: the key is a hash of the
function's structural hash, the target and the machine fingerprint), `records` (one row per
measured candidate: its trace as JSON with the decisions, the decisions alone, the times, the
error that failed it, the build time, the cost model's features, the tdsl version and the time of
measurement) and `retimes` (re-timing sessions: the best few candidates timed again against each
other, taking turns; the fastest of a workload's latest session is its best, see `best`) and
`buckets` (a symbolic function tuned at given sizes: which workload is which size, see
`add_bucket`). The file runs in WAL mode with a busy timeout, and every write is one short
`BEGIN IMMEDIATE` transaction, so several tuning processes can write to it at once.

    db = Database("tuning.db")
    wl = db.workload(func, "cpu")            # this machine's workload of func
    db.best(wl)                              # the best record that passed, or None
    db.export_jsonl("records.jsonl"); db.import_jsonl("records.jsonl")
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS workloads (
    id INTEGER PRIMARY KEY,
    key TEXT UNIQUE NOT NULL,
    func_hash TEXT NOT NULL,
    target TEXT NOT NULL,
    machine TEXT NOT NULL,
    name TEXT NOT NULL,
    script TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload INTEGER NOT NULL REFERENCES workloads(id),
    candidate TEXT NOT NULL,
    trace TEXT NOT NULL,
    decisions TEXT NOT NULL,
    time_s REAL,
    times TEXT NOT NULL,
    error TEXT,
    build_s REAL,
    features TEXT,
    tdsl_version TEXT NOT NULL,
    created REAL NOT NULL,
    status TEXT,
    measured_on TEXT,
    UNIQUE (workload, candidate)
);
CREATE INDEX IF NOT EXISTS records_by_time ON records (workload, time_s);
CREATE TABLE IF NOT EXISTS retimes (
    id INTEGER PRIMARY KEY,
    workload INTEGER NOT NULL REFERENCES workloads(id),
    session INTEGER NOT NULL,
    candidate TEXT NOT NULL,
    time_s REAL NOT NULL,
    rounds TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS retimes_by_session ON retimes (workload, session);
CREATE TABLE IF NOT EXISTS buckets (
    parent_hash TEXT NOT NULL,
    target TEXT NOT NULL,
    machine TEXT NOT NULL,
    sizes TEXT NOT NULL,
    workload INTEGER NOT NULL REFERENCES workloads(id),
    UNIQUE (parent_hash, target, machine, sizes)
);
"""


def workload_key(func_hash: str, target: str, machine: str) -> str:
    """The key of a workload: the function (structural hash), the target and the machine."""
    return hashlib.sha256(f"{func_hash}\x00{target}\x00{machine}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Workload:
    """One function x target x machine."""

    id: int
    key: str
    func_hash: str
    target: str
    machine: str
    name: str
    script: str


@dataclass
class Record:
    """One measured candidate. `ok` when it built, ran and matched the unscheduled function."""

    candidate: str                    # a key of the scheduled program (dedupes candidates)
    trace: str                        # the trace as JSON, decisions included
    decisions: dict = field(default_factory=dict)
    time: float | None = None         # seconds per call (the minimum over repeats)
    times: list = field(default_factory=list)
    error: str | None = None          # why it failed, or None
    build_time: float | None = None
    features: list | None = None
    tdsl_version: str = ""
    created: float = 0.0
    id: int | None = None
    workload: int | None = None
    status: str | None = None         # CUDA: "measured", "verified-unmeasured", "checked-unmeasured"
    where: str | None = None          # CUDA: the GPU that measured it, or how/where it was verified

    @property
    def ok(self) -> bool:
        return self.error is None and self.time is not None

    @property
    def unmeasured(self) -> bool:
        """Built and checked (CUDA, on a machine without a GPU) but not timed: `time` is None."""
        return self.error is None and self.time is None and (self.status or "").endswith("-unmeasured")


class Database:
    """A SQLite tuning database at `path` (created when missing)."""

    def __init__(self, path: str | os.PathLike, timeout: float = 60.0):
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        self._use_wal(timeout)
        self._conn.execute("PRAGMA synchronous = NORMAL")
        with self._write():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._conn.execute(statement)
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            have = {row[1] for row in self._conn.execute("PRAGMA table_info(records)")}
            for column in ("status", "measured_on"):     # files written before CUDA tuning
                if column not in have:
                    self._conn.execute(f"ALTER TABLE records ADD COLUMN {column} TEXT")
        found = self._conn.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
        if found is None or found[0] != str(SCHEMA_VERSION):
            raise ValueError(f"{self.path}: a tuning database of schema {found and found[0]}, this tdsl "
                             f"reads schema {SCHEMA_VERSION}; export it with the tdsl that wrote it")

    def _use_wal(self, timeout: float) -> None:
        """Switch the file to write-ahead logging, waiting out other processes that open it.

        SQLite answers "database is locked" at once, without its busy handler, when a
        second process switches the journal mode while the first is doing the same, so
        the switch is retried here until `timeout`."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError(
                        f"{self.path}: {err}, still after {timeout:g} s; another process holds the "
                        f"tuning database (close it, or pass a longer timeout=)") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.2)

    # transactions ---------------------------------------------------------------------
    class _Tx:
        def __init__(self, conn):
            self.conn = conn

        def __enter__(self):
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, kind, value, tb):
            self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
            return False

    def _write(self):
        return Database._Tx(self._conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<tdsl.tuner.Database {self.path!r}>"

    @property
    def log_path(self) -> str:
        """The tuning log beside the database: `<path>.log`."""
        return self.path + ".log"

    # workloads --------------------------------------------------------------------------
    def workload(self, func, target: str, machine: str | None = None, create: bool = True) -> Workload | None:
        """The workload of `func` on `target` and `machine` (this machine by default); made when
        missing unless `create` is False (then None)."""
        from ..ir import structural_hash
        from .machine import fingerprint

        machine = machine or fingerprint()
        func_hash = structural_hash(func)
        key = workload_key(func_hash, str(target), machine)
        found = self._workload_by_key(key)
        if found is not None or not create:
            return found
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO workloads (key, func_hash, target, machine, name, script, created) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (key, func_hash, str(target), machine, func.name, func.script(), time.time()))
        return self._workload_by_key(key)

    def _workload_by_key(self, key: str) -> Workload | None:
        row = self._conn.execute("SELECT id, key, func_hash, target, machine, name, script FROM workloads "
                                 "WHERE key = ?", (key,)).fetchone()
        return Workload(*row) if row else None

    def workloads(self) -> list[Workload]:
        rows = self._conn.execute("SELECT id, key, func_hash, target, machine, name, script FROM workloads "
                                  "ORDER BY id").fetchall()
        return [Workload(*r) for r in rows]

    # sizes of a symbolic function -----------------------------------------------------------
    def add_bucket(self, func, target: str, sizes: dict, workload: Workload, machine: str | None = None) -> None:
        """Remember that `workload` is the symbolic function `func` at `sizes` (`tune(sizes=)`)."""
        from ..ir import structural_hash
        from .machine import fingerprint

        with self._write() as c:
            c.execute("INSERT OR REPLACE INTO buckets (parent_hash, target, machine, sizes, workload) "
                      "VALUES (?, ?, ?, ?, ?)", (structural_hash(func), str(target), machine or fingerprint(),
                                                 json.dumps(sizes, sort_keys=True), workload.id))

    def buckets(self, func, target: str, machine: str | None = None) -> list[tuple[dict, Workload]]:
        """The sizes the symbolic function `func` was tuned at on `target` and `machine` (this
        machine by default), each with its workload, smallest first."""
        from ..ir import structural_hash
        from .machine import fingerprint

        rows = self._conn.execute(
            "SELECT b.sizes, w.id, w.key, w.func_hash, w.target, w.machine, w.name, w.script FROM buckets b "
            "JOIN workloads w ON w.id = b.workload WHERE b.parent_hash = ? AND b.target = ? AND b.machine = ?",
            (structural_hash(func), str(target), machine or fingerprint())).fetchall()
        out = [(json.loads(r[0]), Workload(*r[1:])) for r in rows]
        return sorted(out, key=lambda b: sorted(b[0].items()))

    # records ----------------------------------------------------------------------------
    def add(self, workload: Workload, record: Record) -> bool:
        """Store `record` under `workload`; False when that candidate was already recorded there."""
        from ..version import __version__

        record.tdsl_version = record.tdsl_version or __version__
        record.created = record.created or time.time()
        with self._write() as c:
            cur = c.execute(
                "INSERT OR IGNORE INTO records (workload, candidate, trace, decisions, time_s, times, error, "
                "build_s, features, tdsl_version, created, status, measured_on) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (workload.id, record.candidate, record.trace, json.dumps(record.decisions), record.time,
                 json.dumps(record.times), record.error, record.build_time,
                 None if record.features is None else json.dumps(record.features), record.tdsl_version,
                 record.created, record.status, record.where))
            added = cur.rowcount == 1
            if added:
                record.id, record.workload = cur.lastrowid, workload.id
        return added

    _COLUMNS = ("id, workload, candidate, trace, decisions, time_s, times, error, build_s, features, "
                "tdsl_version, created, status, measured_on")

    @staticmethod
    def _record(row) -> Record:
        rid, wid, cand, trace, decisions, t, times, error, build_s, features, version, created, status, where = row
        return Record(cand, trace, json.loads(decisions), t, json.loads(times), error, build_s,
                      None if features is None else json.loads(features), version, created, rid, wid, status, where)

    def records(self, workload: Workload, ok_only: bool = False) -> list[Record]:
        """The records of `workload`, oldest first (only those that passed with `ok_only`)."""
        where = " AND error IS NULL AND time_s IS NOT NULL" if ok_only else ""
        rows = self._conn.execute(f"SELECT {self._COLUMNS} FROM records WHERE workload = ?{where} ORDER BY id",
                                  (workload.id,)).fetchall()
        return [self._record(r) for r in rows]

    def best(self, workload: Workload, k: int = 1):
        """The best record of `workload` that passed (None when none did); a list with k > 1.
        Best means: by the time of the workload's latest re-timing session (`add_retimes`)
        among the records it timed, then the others by their own time (records measured at
        different moments under a changing load do not compare as well as candidates timed
        against each other)."""
        rows = self._conn.execute(f"SELECT {self._COLUMNS} FROM records WHERE workload = ? AND error IS NULL "
                                  "AND time_s IS NOT NULL ORDER BY time_s, id", (workload.id,)).fetchall()
        retimed = self.retimes(workload)
        found = sorted((self._record(r) for r in rows),
                       key=lambda r: (0, retimed[r.candidate]) if r.candidate in retimed else (1, r.time))[:k]
        return found if k > 1 else (found[0] if found else None)

    def add_retimes(self, workload: Workload, times: dict, created: float | None = None) -> int:
        """Store a re-timing session of `workload`: `times` maps a record's candidate to
        (seconds, [best of each round]). Returns the session's number (1, 2, ...)."""
        with self._write() as c:
            session = c.execute("SELECT COALESCE(MAX(session), 0) + 1 FROM retimes WHERE workload = ?",
                                (workload.id,)).fetchone()[0]
            c.executemany("INSERT INTO retimes (workload, session, candidate, time_s, rounds, created) "
                          "VALUES (?, ?, ?, ?, ?, ?)",
                          [(workload.id, session, cand, float(t), json.dumps(list(rounds)), created or time.time())
                           for cand, (t, rounds) in times.items()])
        return session

    def retimes(self, workload: Workload, session: int | None = None) -> dict:
        """Candidate -> seconds of the workload's latest re-timing session (or of `session`);
        empty when it has none."""
        if session is None:
            session = self._conn.execute("SELECT MAX(session) FROM retimes WHERE workload = ?",
                                         (workload.id,)).fetchone()[0]
        rows = self._conn.execute("SELECT candidate, time_s FROM retimes WHERE workload = ? AND session = ?",
                                  (workload.id, session)).fetchall()
        return dict(rows)

    def _retime_rows(self, workload: Workload) -> list:
        return self._conn.execute("SELECT session, candidate, time_s, rounds, created FROM retimes WHERE "
                                  "workload = ? ORDER BY session, id", (workload.id,)).fetchall()

    def workloads_of(self, func, target: str) -> list[Workload]:
        """Every workload of `func` on `target`, whatever the machine (CUDA: each GPU that measured
        it, and `unmeasured-<arch>` for the records verified without one)."""
        from ..ir import structural_hash

        rows = self._conn.execute("SELECT id, key, func_hash, target, machine, name, script FROM workloads "
                                  "WHERE func_hash = ? AND target = ? ORDER BY id",
                                  (structural_hash(func), str(target))).fetchall()
        return [Workload(*r) for r in rows]

    def count(self, workload: Workload) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM records WHERE workload = ?", (workload.id,)).fetchone()[0]

    # export / import -------------------------------------------------------------------------
    def export_jsonl(self, path: str | os.PathLike, workload: Workload | None = None) -> int:
        """Write every record (of `workload`, or all) as one JSON object per line, then the
        re-timing sessions (lines with a `retime` object); returns the count of records."""
        n = 0
        with open(path, "w") as fh:
            for wl in [workload] if workload is not None else self.workloads():
                head = {"key": wl.key, "func_hash": wl.func_hash, "target": wl.target, "machine": wl.machine,
                        "name": wl.name, "script": wl.script}
                for r in self.records(wl):
                    line = {"workload": head, "candidate": r.candidate, "trace": r.trace, "decisions": r.decisions,
                                "time": r.time, "times": r.times, "error": r.error, "build_time": r.build_time,
                                "features": r.features, "tdsl_version": r.tdsl_version, "created": r.created,
                                "status": r.status, "where": r.where}
                    fh.write(json.dumps(line) + "\n")
                    n += 1
                for session, cand, t, rounds, created in self._retime_rows(wl):
                    fh.write(json.dumps({"workload": head, "retime": {"session": session, "candidate": cand, "time": t,
                                                                      "rounds": json.loads(rounds),
                                                                      "created": created}}) + "\n")
        return n

    def import_jsonl(self, path: str | os.PathLike) -> int:
        """Add the records of a JSON-lines export (those already here are skipped) and its
        re-timing sessions (each becomes a new session here); returns how many records were added."""
        added = 0
        sessions: dict = {}       # (workload id, session in the file) -> its times here
        with open(path) as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    head = d["workload"]
                    wl = self._import_workload(head)
                    if "retime" in d:
                        rt = d["retime"]
                        sessions.setdefault((wl, rt["session"]), {})[rt["candidate"]] = (float(rt["time"]),
                                                                                        rt.get("rounds") or [])
                        continue
                    rec = Record(d["candidate"], d["trace"], d.get("decisions") or {}, d.get("time"),
                                 d.get("times") or [], d.get("error"), d.get("build_time"), d.get("features"),
                                 d.get("tdsl_version", ""), d.get("created") or 0.0,
                                 status=d.get("status"), where=d.get("where"))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{number}: not a tdsl tuning record ({exc})") from None
                added += self.add(wl, rec)
        for (wl, _), times in sorted(sessions.items(), key=lambda item: (item[0][0].id, item[0][1])):
            self.add_retimes(wl, times)
        return added

    def _import_workload(self, head: dict) -> Workload:
        key = head["key"]
        if key != workload_key(head["func_hash"], head["target"], head["machine"]):
            raise ValueError(f"workload key {key!r} does not match its function, target and machine")
        found = self._workload_by_key(key)
        if found is not None:
            return found
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO workloads (key, func_hash, target, machine, name, script, created) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, head["func_hash"], head["target"], head["machine"],
                                                       head["name"], head["script"], time.time()))
        made = self._workload_by_key(key)
        assert made is not None
        return made
