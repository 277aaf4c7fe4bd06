"""Running hostile input under a time and memory bound, and judging the outcome.

A property test that feeds generated input to the CLI or a parser must survive the input it is looking
for: one that hangs, recurses or allocates gigabytes. :func:`run_isolated` runs a callable in a forked
child (the parent's imports are shared, so an example costs milliseconds, not an interpreter start)
with ``RLIMIT_AS`` raised only ``memory`` bytes above what the parent already maps, and kills it after
``timeout`` seconds. :func:`run_cli` does that for ``koordfw ARGS...`` and captures its output;
:func:`check_cli_outcome` states the contract every command keeps on bad input.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

#: extra address space a child may map beyond the parent's (numpy and friends map a lot up front)
DEFAULT_MEMORY = 1024 * 2**20


@attrs.frozen
class Outcome:
    """What happened to one isolated run. ``rc`` is None when it was killed (timeout or signal)."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    signal: int | None = None

    @property
    def out_of_memory(self) -> bool:
        return "MemoryError" in self.stderr

    def describe(self) -> str:
        how = ("timed out" if self.timed_out else f"killed by signal {self.signal}" if self.signal
               else f"exit {self.rc}")
        return f"{how} after {self.seconds:.2f}s; stderr: {self.stderr[-2000:]!r}"


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_isolated(fn: Callable[[], int | None], *, timeout: float = 20.0, memory: int = DEFAULT_MEMORY) -> Outcome:
    """Run ``fn()`` in a forked child with a memory and time bound; its return value is the exit code.

    The child's stdout and stderr are captured (Python-level ``sys.stdout``/``sys.stderr`` and fds 1/2),
    an exception escaping ``fn`` is printed with its traceback and gives exit 1, a ``MemoryError`` exit 3.
    """
    limit = _vm_bytes() + memory
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
                sys.stdin = io.StringIO("")
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                code = int(fn() or 0)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except MemoryError:
                sys.stderr.write("MemoryError\n")
                code = 3
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        timed_out, status = False, None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - t0 > timeout:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            time.sleep(0.002)
        seconds = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    if os.WIFEXITED(status):
        return Outcome(os.WEXITSTATUS(status), stdout, stderr, seconds, timed_out)
    return Outcome(None, stdout, stderr, seconds, timed_out, os.WTERMSIG(status))


def run_cli(argv: Sequence[str], **kw: Any) -> Outcome:
    """``koordfw ARGV...`` in an isolated child (see :func:`run_isolated`)."""
    from koordfw.cli import main

    return run_isolated(lambda: main(list(argv)), **kw)


def check_cli_outcome(outcome: Outcome, *, names: Sequence[str] = (), max_seconds: float | None = None) -> str:
    """The contract of every command on bad input: exit 0, or exit 2 with one line ``koordfw: error: ...``
    on stderr that contains each of ``names`` (the file, the object, the field); never a traceback, a
    hang, a kill or a MemoryError. Returns ``"ok"`` or ``"error"``; raises ``AssertionError`` otherwise."""
    if outcome.timed_out or outcome.rc is None:
        raise AssertionError(f"not a clean outcome: {outcome.describe()}")
    if max_seconds is not None and outcome.seconds > max_seconds:
        raise AssertionError(f"took {outcome.seconds:.1f}s (bound {max_seconds}s): {outcome.describe()}")
    if "Traceback" in outcome.stderr or outcome.out_of_memory:
        raise AssertionError(f"traceback or memory error: {outcome.describe()}")
    if outcome.rc == 0:
        return "ok"
    if outcome.rc != 2:
        raise AssertionError(f"expected exit 0 or 2: {outcome.describe()}")
    errors = [ln for ln in outcome.stderr.splitlines() if ln.startswith("koordfw: error:")]
    if len(errors) != 1:
        raise AssertionError(f"expected one 'koordfw: error:' line: {outcome.describe()}")
    missing = [n for n in names if n not in errors[0]]
    if missing:
        raise AssertionError(f"the error does not name {missing}: {errors[0]!r}")
    return "error"


def simulate_objects(tmp_path: Any, objects: Sequence[Any], profile: Any = None, *, timeout: float = 30.0) -> Outcome:
    """``koordfw --log-format json simulate DIR -o json [--profile P]`` in an isolated child, for the
    ``objects`` written as one multi-document YAML file under ``tmp_path/m`` (and ``profile``, a mapping,
    as ``tmp_path/p.yaml``): how a plugin's hostile-input tests run a cluster with one bad object in it."""
    from pathlib import Path

    import yaml

    d = Path(tmp_path) / "m"
    d.mkdir(exist_ok=True)
    (d / "c.yaml").write_text(yaml.safe_dump_all(list(objects)))
    argv = ["--log-format", "json", "simulate", str(d), "-o", "json"]
    if profile is not None:
        p = Path(tmp_path) / "p.yaml"
        p.write_text(yaml.safe_dump(profile))
        argv += ["--profile", str(p)]
    return run_cli(argv, timeout=timeout)
