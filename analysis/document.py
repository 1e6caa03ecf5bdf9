"""A report as one list of blocks, rendered to Markdown and to HTML: each block says once what it is (a heading, a
note, a paragraph with its bulleted lines, a table, a figure), and each renderer writes every block the same way.

    doc = [Heading("slm results", 1), Note("Generated ... by slm-report."), Heading("Verdict"),
           Paragraph.of("**Ranking** ...\\n- first\\n- second"), Table(frame),
           Figure("Tiers", "figures/tiers", caption)]
    markdown(doc)                       # report.md: figures linked
    html(doc, figures=Path("figures"))  # report.html: figures embedded (PNG data URIs), each linking its SVG

The first heading of level 1 is the HTML page's title. Inline markup is Markdown's: **bold** and `code`, turned into
<strong> and <code> in HTML (text is escaped first). Also the tables' cell format (fmt) and the Markdown table
other pages reuse (markdown_table).
"""

from __future__ import annotations

import base64
import html as _html
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


def fmt(value, digits: int = 4) -> str:
    """A table cell: integers with thousands separators, floats to `digits` significant digits, empty for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e10):
        return f"{int(value):,}"
    if isinstance(value, float):
        if abs(value) >= 1e6:
            return f"{value:.3g}"
        return f"{value:.{digits}g}"
    return str(value)


def _rows(frame: pd.DataFrame) -> list[list]:
    """The frame's rows as lists of cells, each cell as DataFrame.iterrows gives it (a number column's as a Python
    number where every column is numeric; as stored otherwise), without making a Series per row."""
    return frame.values.tolist()


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""
    if frame.empty:
        return "_(none)_\n"
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for row in _rows(frame):
        cells = [fmt(v).replace("|", "\\|").replace("\n", " ") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def html_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>(none)</em></p>"
    head = "".join(f"<th>{_html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{_html.escape(fmt(v))}</td>" for v in row) + "</tr>"
                   for row in _rows(frame))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def inline(text: str) -> str:
    """Text as HTML: escaped, then **bold** and `code` marked up."""
    text = _html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


# ---------------------------------------------------------------------------------------------- blocks


@dataclass
class Heading:
    text: str
    level: int = 2

    def markdown(self) -> str:
        return f"# {self.text}\n" if self.level == 1 else f"\n{'#' * self.level} {self.text}\n"

    def html(self, figures: Path | None) -> str:
        return f"<h{self.level}>{_html.escape(self.text)}</h{self.level}>"


@dataclass
class Note:
    """A line set apart (the report's "Generated ..."): in italics, in HTML of the note class."""

    text: str

    def markdown(self) -> str:
        return f"_{self.text}_\n"

    def html(self, figures: Path | None) -> str:
        return f"<p class='note'>{_html.escape(self.text)}</p>"


@dataclass
class Paragraph:
    """Lines of text, some of them bullets ("- " in Markdown): in Markdown the lines as they are, in HTML a <p> per
    line of text and each run of bullets one <ul>."""

    lines: list[str]

    @classmethod
    def of(cls, text: str) -> Paragraph:
        return cls(text.split("\n"))

    def markdown(self) -> str:
        return "\n".join(self.lines) + "\n"

    def html(self, figures: Path | None) -> str:
        out, items = [], []
        for line in [*self.lines, None]:
            if line is not None and line.startswith("- "):
                items.append(f"<li>{inline(line[2:])}</li>")
                continue
            if items:
                out.append("<ul>" + "".join(items) + "</ul>")
                items = []
            if line is not None:
                out.append(f"<p>{inline(line)}</p>")
        return "".join(out)


@dataclass
class Table:
    frame: pd.DataFrame

    def markdown(self) -> str:
        return markdown_table(self.frame)

    def html(self, figures: Path | None) -> str:
        return html_table(self.frame)


@dataclass
class Figure:
    """A figure saved as <path>.png and <path>.svg (path relative to the report), its title and caption. Markdown
    links the PNG, with the caption under it; HTML embeds the PNG (the file carries it) and links the SVG, the
    caption in its figcaption; a plain <img> link where the figures folder is not given or has no PNG."""

    title: str
    path: str
    caption: str = ""

    def markdown(self) -> str:
        text = f"![{self.title}]({self.path}.png)\n"
        return text + (f"\n_{self.caption}_\n" if self.caption else "")

    def html(self, figures: Path | None) -> str:
        alt = _html.escape(self.title)
        png = figures / f"{Path(self.path).name}.png" if figures is not None else None
        if png is None or not png.is_file():
            return f"<img src='{self.path}.png' alt='{alt}'>"
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        text = f"{alt}" + (f": {_html.escape(self.caption)}" if self.caption else "")
        return (f"<figure><img src='data:image/png;base64,{data}' alt='{alt}'>"
                f"<figcaption class='note'>{text} (<a href='{self.path}.svg'>SVG</a>)</figcaption></figure>")


Block = Heading | Note | Paragraph | Table | Figure


# ---------------------------------------------------------------------------------------------- renderers


CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}table{border-collapse:collapse;margin:0.8em 0;font-size:0.88em}
th,td{border:1px solid #ccc;padding:0.25em 0.55em;text-align:left}th{background:#f2f2f2}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}figure{margin:0.5em 0}code{background:#f4f4f4;padding:0 0.2em}
.note{color:#666;font-size:0.9em}"""


def markdown(blocks: list[Block]) -> str:
    """The document as Markdown: each block's, one blank line between them."""
    return "\n".join(block.markdown() for block in blocks)


def html(blocks: list[Block], figures: Path | None = None) -> str:
    """The document as one HTML page (its title: the first level-1 heading); `figures`: the folder whose PNGs are
    embedded."""
    title = next((b.text for b in blocks if isinstance(b, Heading) and b.level == 1), "")
    body = "".join(block.html(figures) for block in blocks)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")
