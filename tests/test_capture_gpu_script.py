"""scripts/gpu_capture_check.py on a machine without CUDA: says so, writes its log, exits 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO_ROOT


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: run the script itself")
def test_gpu_script_without_cuda_exits_cleanly(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_capture_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    assert "no CUDA device" in (out / "log.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["log.txt"]
