"""Many ``python -m MODULE ARGS...`` runs for the price of one interpreter start.

A command-line run spends most of its seconds importing JAX. ``run_cases`` starts ONE driver process
(this file) that imports what MODULE imports, then forks one child per command line; the child sets
its argv and environment, sends stdout and stderr to files and runs MODULE as ``__main__`` (runpy),
as ``python -m`` does, and exits through the interpreter as a fresh process would (``sys.exit``'s
code, or 1 and the traceback). Each child is a real process: its exit code, its own stderr, the
files it writes. The driver never starts an XLA backend (it checks before each fork), so every child
initialises its own, as a fresh process does; MODULE itself is not imported before the fork either
(its absl flags are defined once per child).

The driver reads a JSON spec (module, modules to import first, cases of argv and extra environment)
and writes one JSON result per case: returncode, stdout, stderr, seconds (fork to exit).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

PER_CASE_TIMEOUT_S = 120


def run_cases(module: str, preload: list, cases: list, *, cwd, env: dict, timeout: float = 600) -> list:
  """``cases``: [{"argv": [...], "env": {NAME: value}}]; returns [{"returncode", "stdout", "stderr",
  "seconds"}] in the same order. ``env`` is the driver's environment (what every child inherits); a
  case's own ``env`` is set in its child only, so it must not be read when ``preload`` is imported."""
  with tempfile.TemporaryDirectory(prefix="forked_cli_") as tmp:
    spec, results = os.path.join(tmp, "spec.json"), os.path.join(tmp, "results.json")
    with open(spec, "w", encoding="utf-8") as fh:
      json.dump({"module": module, "preload": preload, "cases": cases, "tmp": tmp}, fh)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), spec, results], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"the driver failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    with open(results, encoding="utf-8") as fh:
      return json.load(fh)


def _assert_no_backend() -> None:
  """A forked child must start without the parent's XLA client (its threads do not survive a fork)."""
  from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
  assert not xla_bridge.backends_are_initialized(), "an XLA backend started before the fork"


def _child(module: str, case: dict, out_path: str, err_path: str):
  """Runs in the forked child; never returns to the driver's loop: SystemExit or an exception leaves
  through the interpreter's own exit, as in ``python -m``."""
  for path, fd in ((out_path, 1), (err_path, 2)):
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(target, fd)
    os.close(target)
  for name, value in case.get("env", {}).items():
    os.environ[name] = value
  import runpy  # pylint: disable=import-outside-toplevel
  sys.argv = [module, *case["argv"]]  # runpy puts the module's file in argv[0], as python -m does
  runpy.run_module(module, run_name="__main__", alter_sys=True)
  sys.exit(0)


def _wait(pid: int, timeout: float) -> int:
  deadline = time.monotonic() + timeout
  while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
      return os.waitstatus_to_exitcode(status)
    if time.monotonic() > deadline:
      os.kill(pid, 9)
      return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    time.sleep(0.005)


def _drive(spec_path: str, results_path: str) -> None:
  with open(spec_path, encoding="utf-8") as fh:
    spec = json.load(fh)
  sys.path[0] = os.getcwd()  # what python -m puts first (a script's own folder otherwise)
  import importlib  # pylint: disable=import-outside-toplevel
  for name in spec["preload"]:
    importlib.import_module(name)
  assert spec["module"] not in sys.modules, f"{spec['module']} must run in the child only"
  results = []
  for i, case in enumerate(spec["cases"]):
    out_path, err_path = (os.path.join(spec["tmp"], f"{i}.{s}") for s in ("out", "err"))
    _assert_no_backend()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
      _child(spec["module"], case, out_path, err_path)
    returncode = _wait(pid, PER_CASE_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    with open(out_path, encoding="utf-8", errors="replace") as out, \
        open(err_path, encoding="utf-8", errors="replace") as err:
      results.append({"returncode": returncode, "stdout": out.read(), "stderr": err.read(), "seconds": seconds})
  with open(results_path, "w", encoding="utf-8") as fh:
    json.dump(results, fh)


if __name__ == "__main__":
  _drive(sys.argv[1], sys.argv[2])
