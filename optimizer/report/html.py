"""``report.html``: the Markdown report as one self-contained page, its charts embedded.

MLflow's artifact viewer shows a ``.md`` file as plain text and a PNG on its own, but renders an
HTML file in place; a reviewer opening the run then sees the verdict, the tables and the charts
together. The page is made from ``report.md`` itself (CommonMark with tables, through
markdown-it-py), so the two never say different things. Each chart the Markdown links by file
name is read from the report directory and inlined as a base64 ``data:`` URI: the page is one
file, which needs nothing beside it and no network (the viewer's frame loads nothing else).
Raw HTML in the Markdown is escaped, not passed through: labels and paths come from user input.
For the same reason the page makes no link: the report writes none, so Markdown links and
autolinks (``[a](http://...)``, ``<http://...>`` in a workdir's path) are shown as the text they
are, and an image that is not one of the report's own charts is shown as its Markdown source,
never fetched.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em;
       color: #1f2328; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #d0d7de; padding: 0.3em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
img { max-width: 100%; border: 1px solid #d0d7de; margin: 0.5em 0; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.4em; } h3 { font-size: 1.1em; }
code { background: #f6f8fa; padding: 0 0.2em; }
pre { background: #f6f8fa; padding: 0.5em; white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def _data_uri(directory: Path, name: str) -> str | None:
    """The chart ``name`` (a file directly in ``directory``) as a data URI, else None."""
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        return None
    path = directory / name
    if path.suffix.lower() != ".png" or not path.is_file():
        return None
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(markdown: str, directory: str | Path, title: str = "Benchmark report") -> str:
    """The page for ``markdown`` (a report.md), its PNG charts read from ``directory``."""
    from markdown_it import MarkdownIt

    directory = Path(directory)
    # CommonMark leaves a bare http://... as text (no linkify); links and autolinks are off
    parser = MarkdownIt("commonmark", {"html": False}).enable("table").disable(
        ["link", "autolink"])
    default_image = parser.renderer.rules.get("image")

    def image(_renderer, tokens, idx, options, env):
        token = tokens[idx]
        src = token.attrGet("src") or ""
        inlined = _data_uri(directory, src)
        if inlined is None:  # not a chart of this report: its source, as text
            return html.escape(f"![{token.content}]({src})")
        token.attrSet("src", inlined)
        return default_image(tokens, idx, options, env)

    parser.add_render_rule("image", image)
    body = parser.render(markdown)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
            f"<body>\n{body}</body>\n</html>\n")
