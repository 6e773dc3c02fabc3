"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks:``): the pages that restate what the code
already knows are generated from the code when the site is built, never copied by hand.

A page asks for generated text with a marker on a line of its own, ``<!-- generated: NAME [ARG] -->``:

- ``kafka-defaults``: the table of every key segjobs reads, with Kafka's defaults
  (:func:`jobs.rules.kafka_defaults.markdown_table`, from ``KAFKA_DEFAULTS``);
- ``kafka-topics``: the configs segjobs gives Kafka's own topics (``jobs.rules.config.KAFKA_TOPICS``);
- ``cli-help COMMAND``: ``segjobs COMMAND --help`` as the command line prints it (``COMMAND`` may be ``segjobs``
  for the top-level help, or ``config import``).

An unknown marker fails the build. The API reference is mkdocstrings' (``::: module`` in docs/reference/); its
docstrings are written in reST (Sphinx roles such as ``:func:`x```, ``::`` before a literal block), which
:func:`on_page_content` reduces to the code and a colon.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([a-z -]+))? -->$", flags=re.M)
#: the width of the generated --help text: argparse wraps to $COLUMNS
HELP_COLUMNS = 100
_ROLE = re.compile(r":(?:func|class|meth|data|mod|attr|exc|obj):(?=<code>)")
#: reST's "paragraph::" that introduces a literal block (rendered as a code block already): one colon is the prose
_LITERAL_INTRO = re.compile(r"::</p>")


def kafka_topics_table() -> str:
    """The configs segjobs applies to Kafka's own topics, from ``KAFKA_TOPICS``, as a Markdown table."""
    from jobs.rules.config import KAFKA_TOPICS
    from jobs.rules.kafka_defaults import KAFKA_DEFAULTS

    lines = ["| topic | what segjobs applies | from Kafka's |", "|---|---|---|"]
    for topic, known in KAFKA_TOPICS.items():
        if known.never_touched:
            applied = f"never touched by any job, whatever the config: {known.never_touched}"
        else:
            read = [f"`{k}={v}`" for k, v in known.settings.items() if k in KAFKA_DEFAULTS]
            inert = [f"`{k}={v}`" for k, v in known.settings.items() if k not in KAFKA_DEFAULTS]
            applied = ", ".join(read) + (f" (and {', '.join(inert)}: inert offline)" if inert else "")
        lines.append(f"| `{topic}` | {applied} | {known.source} |")
    lines.append("| any other topic | Kafka's defaults, then your config | |")
    return "\n".join(lines)


def cli_help(command: str) -> str:
    """``segjobs COMMAND --help`` (or ``segjobs --help`` for ``segjobs``) at a fixed width, as a text block."""
    from jobs.commands.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    try:
        parser = build_parser()
        words = [] if command == "segjobs" else command.split()
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            parser.parse_args([*words, "--help"])
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    text = out.getvalue().rstrip()
    if not text.startswith("usage:"):
        raise ValueError(f"`segjobs {command} --help` printed no usage")
    return f"```text\n$ segjobs {'' if command == 'segjobs' else command + ' '}--help\n{text}\n```"


def render(name: str, arg: str | None) -> str:
    """The text one marker stands for (``ValueError`` for a marker no generator knows)."""
    if name == "kafka-defaults" and not arg:
        from jobs.rules.kafka_defaults import markdown_table

        return markdown_table()
    if name == "kafka-topics" and not arg:
        return kafka_topics_table()
    if name == "cli-help" and arg:
        return cli_help(arg)
    raise ValueError(f"unknown marker <!-- generated: {name}{' ' + arg if arg else ''} -->")


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: ... -->`` marker replaced by its text."""
    return MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return expand(markdown)
    except ValueError as exc:  # a build error naming the page, not a traceback
        raise PluginError(f"{page.file.src_path}: {exc}") from None


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return _LITERAL_INTRO.sub(":</p>", _ROLE.sub("", html))
