"""The notebooks run top to bottom against sample_traces/ (nbclient, kernel python3) and are stored clean."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_is_a_first_notebook():
    assert REPO / "notebooks" / "01_explore.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    """`jupyter nbconvert --execute` on a copy outside the repository, started from yet another folder and
    without $TRACEATTR_REPO: the notebook finds the sample traces on its own."""
    import shutil
    import subprocess
    import sys

    pytest.importorskip("nbconvert")
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    env = {k: v for k, v in os.environ.items() if k not in ("TRACEATTR_REPO", "MPLBACKEND")}
    result = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                             "--output-dir", str(tmp_path), str(copy)], cwd=REPO.parent, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    notebook = nbformat.read(tmp_path / path.name, as_version=4)
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    text = "".join(out.get("text", "") for out in outputs)
    if path.name == "01_explore.ipynb":
        assert len(images) >= 5            # category per rank, top kernels, roofline, critical path, delta waterfall
        assert "ms on their critical paths" in text
        assert "straggler rank 2: made the others wait" in text and "more device compute" in text
        assert "outlier step: " in text and "step imbalance (max/median wall)" in text and "busiest rank" in text


def test_first_notebook_runs_on_cpu_only_traces(tmp_path):
    """The same notebook pointed at CPU-only traces (as a user would, editing TRACES): the conservation
    cell, the category plot and the rank imbalance stopped with raw pandas/numpy tracebacks."""
    from nbclient import NotebookClient

    notebook = nbformat.read(REPO / "notebooks" / "01_explore.ipynb", as_version=4)
    first = notebook.cells[1]
    assert 'TRACES = ROOT / "sample_traces" / "synthetic_2rank"' in first.source
    first.source = first.source.replace('"synthetic_2rank"', '"capture_cpu_2rank"')
    NotebookClient(notebook, timeout=240, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env={**os.environ,
                                                                                 "TRACEATTR_REPO": str(REPO)})
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert [out.get("evalue") for out in outputs if out.output_type == "error"] == []
    text = "".join(out.get("text", "") for out in outputs)
    assert "no device time in these traces (CPU-only)" in text and "no busy imbalance" in text
