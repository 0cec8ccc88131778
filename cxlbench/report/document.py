"""A report as a list of blocks (headings, paragraphs, tables, figures, folded sections),
written out as self-contained HTML (images inline, nothing fetched) or as Markdown with the
figures beside it. A fleet's report is several pages (Page) that link to each other (Link:
a table cell or a line of links), each page as its own HTML and Markdown file. Every text is escaped on the way out: job names and parameters come
from suites and results, which anyone may have written, and paths may hold bytes that are
not UTF-8 (shown as \\xNN, see text.printable)."""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field

from .figures import Figure
from .figures.layout import PAGE_PX
from .text import printable


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str
    kind: str = ""          # "note": set apart (the emulation and cross-machine warnings);
    #                         "headline": a first-screen finding (the tier model's error)


@dataclass
class Table:
    headers: list[str]
    rows: list[list]


@dataclass
class Folded:
    summary: str
    blocks: list = field(default_factory=list)


@dataclass(frozen=True)
class Link:
    """A link to another page of the report: its path relative to the page holding the
    link, without an extension (each format adds its own: .html or .md)."""
    text: str
    target: str


@dataclass
class Links:
    """A line of links (to the index, to a machine's kind), after a lead-in."""
    lead: str
    links: list[Link]


@dataclass
class Page:
    """One more page of a report: pages/NAME.html and .md, NAME of [A-Za-z0-9_.-]."""
    name: str
    title: str
    blocks: list


# The page is as wide as the widest figure (layout.PAGE_PX), so figures show 1:1, their
# fonts at the size they were drawn; a narrower window scales them down.
STYLE = f"""
body {{ font-family: sans-serif; max-width: {PAGE_PX}px; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.4; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.85rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left;
          vertical-align: top; }}
th {{ background: #f0f0f0; }}
figure {{ margin: 1rem 0 2rem; }}
figure img {{ max-width: 100%; height: auto; }}
figcaption {{ font-size: 0.85rem; color: #444; max-width: 60rem; }}
.note {{ background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.4rem 0.8rem; }}
.headline {{ background: #e8f1fb; border-left: 4px solid #2f6db5; padding: 0.4rem 0.8rem;
            font-weight: 600; }}
details {{ margin: 0.5rem 0 1.5rem; }}
"""


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _escape(text: str) -> str:
    return html.escape(printable(text))


def _href(link: Link, ext: str) -> str:
    return html.escape(f"{link.target}.{ext}")


def _html_cell(value) -> str:
    if isinstance(value, list):         # several links (and words) in one cell
        return ", ".join(_html_cell(v) for v in value)
    if isinstance(value, Link):
        return f'<a href="{_href(value, "html")}">{_escape(value.text)}</a>'
    return _escape(_cell(value))


def to_html(title: str, blocks: list) -> str:
    e = _escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{e(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
           f"<h1>{e(title)}</h1>"]

    def write(block) -> None:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{e(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            cls = f' class="{block.kind}"' if block.kind else ""
            out.append(f"<p{cls}>{e(block.text)}</p>")
        elif isinstance(block, Table):
            out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in block.headers)
                       + "</tr></thead><tbody>")
            for row in block.rows:
                out.append("<tr>" + "".join(f"<td>{_html_cell(v)}</td>" for v in row)
                           + "</tr>")
            out.append("</tbody></table>")
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode()
            out.append(f'<figure id="{e(block.key)}"><img src="data:image/png;base64,{data}" '
                       f'alt="{e(block.title)}"><figcaption>{e(block.caption)}</figcaption>'
                       "</figure>")
        elif isinstance(block, Links):
            out.append(f"<p>{e(block.lead)} "
                       + " · ".join(_html_cell(link) for link in block.links) + "</p>")
        elif isinstance(block, Folded):
            out.append(f"<details><summary>{e(block.summary)}</summary>")
            for b in block.blocks:
                write(b)
            out.append("</details>")
        else:
            raise TypeError(f"unknown report block {block!r}")

    for block in blocks:
        write(block)
    out += ["</body>", "</html>", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    """Markdown passes raw HTML through, so escape it; pipes would split table cells."""
    return (html.escape(printable(str(text)), quote=False).replace("|", "\\|")
            .replace("\n", " "))


def _md_cell(value) -> str:
    if isinstance(value, list):
        return ", ".join(_md_cell(v) for v in value)
    if isinstance(value, Link):
        return f"[{_md(value.text)}]({html.escape(value.target, quote=False)}.md)"
    return _md(_cell(value))


def to_markdown(title: str, blocks: list, figure_dir: str) -> str:
    out = [f"# {_md(title)}", ""]

    def write(block) -> None:
        if isinstance(block, Heading):
            out.extend(["#" * block.level + " " + _md(block.text), ""])
        elif isinstance(block, Para):
            out.extend([("> " if block.kind else "") + _md(block.text), ""])
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_md(h) for h in block.headers) + " |")
            out.append("|" + "---|" * len(block.headers))
            out.extend("| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows)
            out.append("")
        elif isinstance(block, Figure):
            out.extend([f"![{_md(block.title)}]({figure_dir}/{block.key}.png)", "",
                        f"*{_md(block.caption)}*", ""])
        elif isinstance(block, Links):
            out.extend([f"{_md(block.lead)} " + " · ".join(_md_cell(link)
                                                         for link in block.links), ""])
        elif isinstance(block, Folded):
            out.extend([f"**{_md(block.summary)}**", ""])
            for b in block.blocks:
                write(b)

    for block in blocks:
        write(block)
    return "\n".join(out)


def figures_in(blocks: list) -> list[Figure]:
    out = []
    for b in blocks:
        if isinstance(b, Figure):
            out.append(b)
        elif isinstance(b, Folded):
            out.extend(figures_in(b.blocks))
    return out
