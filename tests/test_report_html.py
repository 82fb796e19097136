"""report.html: the Markdown report as one page, its charts inlined, nothing loaded from outside."""

import base64
import re
from html.parser import HTMLParser

from benchmark_testing import noisy_samples, synthetic_result, top1_fidelity

from tfopt.optimizer.gate.verdict import evaluate_gate
from tfopt.optimizer.report.html import render_html
from tfopt.optimizer.report.write import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N = 120


class _Page(HTMLParser):
    """What a browser would fetch (every src/href) and the text of each table cell."""

    def __init__(self):
        super().__init__()
        self.sources, self.cells, self._in_cell = [], [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href"):
            if attrs.get(name):
                self.sources.append((tag, attrs[name]))
        if tag in ("td", "th"):
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


def _result():
    return synthetic_result(
        {1: noisy_samples(0.002, N, 0)},
        {"frozen": {"samples": {1: noisy_samples(0.0012, N, 1)},
                    "fidelity": top1_fidelity(1.0)}})


def test_the_report_page_holds_the_verdict_tables_and_every_chart_inline(tmp_path):
    result = _result()
    files = write_report(result, tmp_path / "report", evaluate_gate(result))

    page = files.html.read_text()
    parsed = _Page()
    parsed.feed(page)

    assert files.html.name == "report.html" and page.startswith("<!DOCTYPE html>")
    assert "<strong>Gate: PROMOTE frozen.</strong>" in page
    assert "candidate: frozen" in parsed.cells and "inference time (p50, batch 1)" in parsed.cells
    images = [src for tag, src in parsed.sources if tag == "img"]
    assert len(images) == len(files.charts) == 2
    for src, chart in zip(images, files.charts):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == chart.read_bytes()
    # one self-contained file: nothing else is fetched
    assert [s for s in parsed.sources if not s[1].startswith("data:")] == []


def test_markup_in_the_report_is_shown_as_text_not_run(tmp_path):
    markdown = ("# Benchmark report\n\n| model | path |\n| --- | --- |\n"
                "| <script>alert(1)</script> | <img src=x onerror=alert(2)> |\n")

    page = render_html(markdown, tmp_path)

    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_only_png_files_directly_in_the_report_directory_are_inlined(tmp_path):
    (tmp_path / "chart.png").write_bytes(PNG_MAGIC + b"chart")
    (tmp_path / "notes.txt").write_text("not a chart")
    outside = tmp_path.parent / "outside.png"
    outside.write_bytes(PNG_MAGIC + b"secret")
    markdown = ("![a](chart.png) ![b](notes.txt) ![c](../outside.png) ![d](missing.png)\n")

    page = render_html(markdown, tmp_path)
    sources = re.findall(r'src="([^"]*)"', page)

    assert sources[0] == "data:image/png;base64," + base64.b64encode(
        PNG_MAGIC + b"chart").decode()
    # the others are shown as the Markdown they are, never fetched
    assert sources[1:] == []
    assert "![b](notes.txt) ![c](../outside.png) ![d](missing.png)" in page


def test_links_in_a_workdirs_path_are_shown_as_text_not_made_links(tmp_path):
    import dataclasses

    workdir = "/srv/<http://autolink.example>/[here](http://link.example)/http://bare.example/"
    result = _result()
    result = dataclasses.replace(
        result, baseline=dataclasses.replace(result.baseline, path=workdir + "input"),
        candidates=tuple(dataclasses.replace(c, path=workdir + c.label)
                         for c in result.candidates),
        notes=(f"![x](http://image.example/p.png) from {workdir}",))
    files = write_report(result, tmp_path / "report", evaluate_gate(result))

    parsed = _Page()
    parsed.feed(files.html.read_text())
    assert [s for s in parsed.sources if not s[1].startswith("data:")] == []
    assert workdir + "input" in parsed.cells and workdir + "frozen" in parsed.cells
    assert "<a " not in files.html.read_text()
