"""`python -c SCRIPT args` for scripts that import torch, without each paying torch's import (~2.3 s CPU).

One server process imports torch once; each script runs in a process forked from it, so every script still
has a process of its own: its own exit code or signal, Ctrl-C, atexit and interpreter shutdown (a segfault at
exit is still -11/139), and nothing a script changes (torch's profiler left on, patched functions) reaches the
next. The fork is taken before torch has run anything, as torch's DataLoader workers fork on Linux.

Tests of what a fresh interpreter does (its imports, the installed script, torchrun) keep real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

# the server: reads one request a line, forks, and answers the child's pid and then its wait status. The
# child leaves the loop and runs the script as this interpreter's __main__ code, then exits as `python -c` does
SERVER = r"""
import json, os, sys
import torch

requests, answers = sys.stdin, os.fdopen(os.dup(1), "w", buffering=1)
while True:
    line = requests.readline()
    if not line:
        os._exit(0)
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        break
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.write(json.dumps({"status": os.waitpid(pid, 0)[1]}) + "\n")

answers.close()
for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["out"], os.O_WRONLY),
                        (2, request["err"], os.O_WRONLY)):
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)
os.environ.clear()
os.environ.update(request["env"])
sys.argv = ["-c", *request["args"]]
source = request["source"]
del json, requests, answers, line, request, pid, fd, path, flags, opened
exec(compile(source, "<string>", "exec"))
"""


class TorchForks:
    """A started server; `run` is `subprocess.run([sys.executable, "-c", source, *args], capture_output=True,
    text=True, timeout=timeout, env=env)` on a process forked from it."""

    def __init__(self, workdir: Path, env: dict):
        self.workdir, self.count = Path(workdir), 0
        self.server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env, bufsize=1)

    def run(self, source: str, *args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
        self.count += 1
        out, err = self.workdir / f"{self.count}.out", self.workdir / f"{self.count}.err"
        out.touch(), err.touch()
        request = dict(source=textwrap.dedent(source), args=list(args), env=env, out=str(out), err=str(err))
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        pid = json.loads(self.server.stdout.readline())["pid"]
        timer = _Timer(timeout, pid)
        try:
            answer = self.server.stdout.readline()
        finally:
            timer.cancel()
        if not answer:
            raise RuntimeError(f"the torch fork server died: {self.server.wait()}")
        status = json.loads(answer)["status"]
        done = subprocess.CompletedProcess(["python", "-c", "...", *args], os.waitstatus_to_exitcode(status),
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))
        if timer.fired:
            raise subprocess.TimeoutExpired(done.args, timeout, done.stdout, done.stderr)
        return done

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(timeout=60)


class _Timer:
    """SIGKILL to `pid` after `timeout` s, as subprocess.run's timeout does (its answer then still arrives)."""

    def __init__(self, timeout: float, pid: int):
        self.fired = False
        self._timer = threading.Timer(timeout, self._kill, (pid,))
        self._timer.start()

    def _kill(self, pid: int) -> None:
        self.fired = True
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()
