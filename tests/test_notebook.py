"""`%load_ext diagnose` and `%%diagnose` in a real kernel: the notebook in examples/ executed by nbclient with
ipykernel, as Jupyter runs it (never the magic's function called directly)."""
from __future__ import annotations

import pytest
from conftest import REPO

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat, nbclient and ipykernel")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbformat, nbclient and ipykernel")
pytest.importorskip("ipykernel", reason="the notebook tests need nbformat, nbclient and ipykernel")

EXAMPLE = REPO / "examples" / "diagnose_in_a_notebook.ipynb"


def _execute(notebook, folder, timeout: int = 600):
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def _with_options(notebook, options: str):
    for cell in notebook.cells:
        if cell.source.startswith("%%diagnose"):
            cell.source = cell.source.replace("%%diagnose", f"%%diagnose {options}", 1)
    return notebook


def _outputs(cell, kind: str) -> str:
    found = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            found.append(output.text if kind == output.name else "")
        elif "data" in output:
            found.append(output.data.get(kind, ""))
    return "".join(found)


def _diagnose_cell(notebook):
    return next(c for c in notebook.cells if c.source.startswith("%%diagnose"))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_the_example_notebook_shows_the_diagnosis_inline_and_keeps_the_cells_state(tmp_path):
    notebook = _execute(_with_options(nbformat.read(EXAMPLE, as_version=4), "--experiments none"), tmp_path)
    cell = _diagnose_cell(notebook)
    html = _outputs(cell, "text/html")
    assert "Training waits for the DataLoader" in html and "<svg" in html and "report.html" in html
    assert "Training waits for the DataLoader" in _outputs(cell, "text/plain")  # a plain-text front end too
    assert "diagnosis came" in _outputs(cell, "stderr") and "steps at each next" in _outputs(cell, "stderr")
    assert "trained 256 steps" in _outputs(notebook.cells[-1], "stdout"), "the loop ran to its end in the kernel"
    [run] = (tmp_path / "diagnose_runs").iterdir()
    assert (run / "report.html").exists() and list((run / "tb").glob("rank0.*.json"))


@pytest.mark.full  # starts processes (a whole run, the CLI, a script): the full tier
def test_a_history_a_script_cannot_replay_gets_the_exported_script_and_the_command(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%load_ext diagnose"),
                      nbformat.v4.new_code_cell("!echo data ready"),
                      nbformat.v4.new_code_cell("%%diagnose --warmup 2 --steps 3\nimport torch\n"
                                                "w = torch.zeros(4, requires_grad=True)\n"
                                                "for _ in range(8):\n    (w * 2).sum().backward()")]
    cell = _execute(notebook, tmp_path).cells[-1]
    said = _outputs(cell, "stderr")
    assert "no experiments" in said and "echo data ready" in said and "diagnose run --experiments findings" in said
    exported = next((tmp_path / "diagnose_runs").iterdir()) / "notebook_cells.py"
    assert "w = torch.zeros(4, requires_grad=True)" in exported.read_text()


@pytest.mark.bench  # a long timing check, run before a release: the bench tier (not in CI)
def test_the_example_notebook_runs_the_experiments_on_its_exported_cells(tmp_path):
    cell = _diagnose_cell(_execute(nbformat.read(EXAMPLE, as_version=4), tmp_path, timeout=900))
    html = _outputs(cell, "text/html")
    assert "dataloader.num_workers" in html and "verified" in html
