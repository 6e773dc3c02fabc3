"""notebooks/dirty_ratios.ipynb runs end to end (nbclient, the venv's kernel) on a log dir given by the environment
(SEGJOBS_LOG_DIR and the rest, as a headless run on one's own dir gives them) and its generated demo ledger, so it
cannot rot: every cell executes without error or anything on stderr, the parameters are the environment's, the
inspect table shows every partition, the ledger's run table shows the demo's six runs, and each of the six charts
renders as one decodable PNG of sane size. The kernel is a separate process and starts its own small Spark
session."""

from __future__ import annotations

import ast
import base64
import io
import os
import shlex
import sys
import time
from pathlib import Path

# Plain imports, not importorskip: the dev extras install them, and a missing install step must fail the run
# rather than skip the notebook silently.
import nbclient
import nbformat
import pytest
from PIL import Image

pytestmark = pytest.mark.scenario  # minutes of whole-process runs: `make test-scenarios` runs it, not `make test`

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "dirty_ratios.ipynb"
DEMO_PARTITIONS = ("users-changelog-0", "users-changelog-1", "orders-0", "clicks-0")
#: Modules the notebook may import: the package, and what displays its results.
ALLOWED_IMPORTS = {"jobs", "segment_io", "tempfile", "pandas"}
#: The one line the kernel's stderr may show: Java's own announcement of the incubator module Spark's launcher adds
#: (printed before any logging starts, with no option to turn it off; the command line drops it from the JVM's
#: output, a session built in a notebook does not pass its output through Python).
JVM_START_LINES = {"WARNING: Using incubator modules: jdk.incubator.vector"}


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_notebook_is_stored_clean_and_holds_no_logic() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    cells = _code_cells(nb)
    assert "parameters" in cells[0].metadata.get("tags", [])
    assert "LOG_DIR = None" in cells[0].source
    # every parameter can come from the environment, and the first cell says how
    from jobs.engine.inspect.driver import NOTEBOOK_PARAMETERS

    names = [t.targets[0].id for t in ast.parse(cells[0].source).body if isinstance(t, ast.Assign)]
    assert names == list(NOTEBOOK_PARAMETERS)
    assert f"{', '.join(names)} = notebook_parameters(" in cells[1].source
    assert all(f"`SEGJOBS_{name}`" in nb.cells[0].source for name in names)
    for cell in cells:
        assert cell.outputs == [] and cell.execution_count is None, "commit the notebook without outputs"
        # IPython magics (%matplotlib inline) are not Python
        tree = ast.parse("\n".join(line for line in cell.source.splitlines() if not line.startswith("%")))
        for node in ast.walk(tree):
            assert not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Lambda, ast.For, ast.While,
                                         ast.ListComp, ast.DictComp, ast.GeneratorExp)), \
                f"logic belongs in the package, not the notebook: {ast.dump(node)[:80]}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                assert {n.split(".")[0] for n in names} <= ALLOWED_IMPORTS, names


@pytest.mark.slow
def test_notebook_executes_end_to_end(tmp_path, monkeypatch) -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    from jobs.engine.inspect.driver import write_demo_log_dir
    from jobs.rules.timeutil import format_instant

    # the parameters a headless run on one's own log dir gives, in the environment the kernel inherits
    mine = write_demo_log_dir(tmp_path / "mine")
    now = format_instant(mine.now_ms)
    monkeypatch.setenv("SEGJOBS_LOG_DIR", mine.log_dir)
    monkeypatch.setenv("SEGJOBS_NOW", now)
    monkeypatch.setenv("SEGJOBS_OVERRIDES", shlex.join(mine.overrides))

    spec = KernelSpecManager().get_kernel_spec("python3")
    # jupyter_client runs a spec whose argv starts with "python" with the current interpreter: the venv's
    assert spec.argv[0] in ("python", sys.executable), spec.argv
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=240,
                                     resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.monotonic()
    client.execute()  # raises CellExecutionError, with the cell and traceback, when a cell fails
    elapsed = time.monotonic() - t0

    outputs = [o for c in _code_cells(nb) for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # nothing red: no warning on stderr (Spark's cut plan string included)
    stderr = [line for o in outputs if o.output_type == "stream" and o.name == "stderr"
              for line in o.text.splitlines() if line.strip()]
    assert set(stderr) <= JVM_START_LINES, stderr
    printed = next(c for c in _code_cells(nb) if c.source.startswith("if LOG_DIR is None"))
    assert printed.outputs[0]["text"] == f"{mine.log_dir} {list(mine.overrides)} {now}\n"
    # every chart cell shows exactly one image, a real PNG of sane size (not an empty or runaway figure)
    chart_cells = [c for c in _code_cells(nb) if "plots." in c.source and "_chart(" in c.source]
    assert len(chart_cells) == 6
    for cell in chart_cells:
        pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, f"{cell.source!r} shows {len(pngs)} image(s)"
        data = base64.b64decode(pngs[0])
        assert len(data) > 5_000, f"{cell.source!r}: a {len(data)}-byte PNG is blank or nearly"
        image = Image.open(io.BytesIO(data))
        image.load()  # decodes, or raises
        width, height = image.size
        assert 300 <= width <= 2_000 and 100 <= height <= 2_000, (cell.source, image.size)
        shades = image.convert("L").getcolors(maxcolors=256)  # None: more than 256 grey levels
        assert shades is None or len(shades) > 10, f"{cell.source!r}: the image has no content"
        if os.environ.get("SEGJOBS_PLOTS_DIR"):  # to look at them
            name = cell.source.split("(")[0].split(".")[-1] + ("-by-topic" if "topic" in cell.source else "")
            Path(os.environ["SEGJOBS_PLOTS_DIR"], f"notebook-{name}.png").write_bytes(data)
    html = "\n".join(o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {}))
    for name in DEMO_PARTITIONS:
        assert name in html, f"{name} missing from the inspect table"
    # the error table is empty for the demo: no partition row in it, only the headings
    errors_cell = next(c for c in _code_cells(nb) if "error.isNotNull" in c.source)
    errors_html = errors_cell.outputs[0]["data"]["text/html"]
    assert not any(name in errors_html for name in DEMO_PARTITIONS)
    # the demo ledger: three nights of retain then compact, every run ok
    runs_cell = next(c for c in _code_cells(nb) if "read_history(" in c.source)
    runs_html = runs_cell.outputs[0]["data"]["text/html"]
    assert runs_html.count("<td>retain</td>") == 3 and runs_html.count("<td>compact</td>") == 3, runs_html
    assert runs_html.count("<td>ok</td>") == 6, runs_html
    print(f"notebook executed in {elapsed:.1f}s")
