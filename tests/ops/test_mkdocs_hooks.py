"""The documentation site's generated pages (ops/mkdocs_hooks.py): each marker becomes what the code says, an
unknown marker fails the build, and no page carries a hand-copied table the code already holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.commands.cli import COMMANDS
from jobs.rules.config import KAFKA_TOPICS
from ops.mkdocs_hooks import MARKER, expand, on_page_content

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").rglob("*.md"))


def test_every_marker_of_the_docs_renders() -> None:
    markers = [(page, m.group(0)) for page in PAGES for m in MARKER.finditer(page.read_text())]
    assert len(markers) >= 3, markers
    for page, marker in markers:
        assert "<!-- generated:" not in expand(marker), f"{page}: {marker} was left as it is"


def test_the_kafka_topics_table_comes_from_kafka_topics() -> None:
    text = expand("<!-- generated: kafka-topics -->")
    for topic, known in KAFKA_TOPICS.items():
        assert f"| `{topic}` |" in text
        assert known.source in text
    assert "`segment.bytes=104857600`" in text  # a key segjobs reads
    assert "`compression.type=producer`" in text.split("inert offline")[0]  # and one it accepts and ignores
    page = (REPO / "docs" / "configuration.md").read_text()
    assert "<!-- generated: kafka-topics -->" in page and "| `__consumer_offsets` |" not in page


def test_every_command_has_its_generated_help_in_the_reference() -> None:
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    for command in COMMANDS:
        wanted = "config import" if command == "config" else command
        assert f"<!-- generated: cli-help {wanted} -->" in page, command
    text = expand("<!-- generated: cli-help compact -->")
    assert text.startswith("```text\n$ segjobs compact --help\nusage: segjobs compact")
    assert "--dedupe-buffer-bytes" in text and text.endswith("```")


def test_an_unknown_marker_fails() -> None:
    with pytest.raises(ValueError, match="unknown marker"):
        expand("<!-- generated: kafka-default -->")


def test_sphinx_roles_of_docstrings_render_as_code() -> None:
    html = "<p>see :func:<code>compact</code> and :class:<code>Seams</code>::</p>"
    assert on_page_content(html, None, None, None) == "<p>see <code>compact</code> and <code>Seams</code>:</p>"
