"""How big a figure is and where its legend goes. The report's page is PAGE_PX CSS pixels
wide (document.STYLE) and figures are drawn at DPI, so a figure no wider than the page
is shown 1:1 and its fonts (FONTS, none under 9 pt) read at their size; panels wrap into
a grid rather than one long row; legends sit outside the plots, one for the figure where
all its names fit one (MAX_LEGEND), else one beside each panel."""
from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from ..text import printable  # noqa: E402

DPI = 100
PAGE_PX = 1100                  # the page's width in CSS pixels: the widest figure
MAX_WIDTH = PAGE_PX / DPI       # inches
PANEL_HEIGHT = 3.4              # inches a row of panels takes
MAX_LEGEND = 12                 # entries in one legend
LEGEND_CHARS = 40               # characters on one line of a legend entry
FONTS = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 9,
         "figure.titlesize": 11, "figure.dpi": DPI}
CHAR_WIDTH = 0.07               # inches a 9 pt character takes, on average


def entry(name: str) -> str:
    """A legend entry over lines of at most LEGEND_CHARS."""
    return textwrap.fill(name, LEGEND_CHARS)


def wrap(text: str, width: float, fontsize: float = 10) -> str:
    """Text (a title) broken into lines that fit `width` inches at `fontsize`."""
    return textwrap.fill(text, max(20, int(width / (CHAR_WIDTH * fontsize / 9))))


def legend_width(names) -> float:
    """Inches a legend of these names takes beside a plot (0: no legend)."""
    names = [n for n in names if n]
    if not names:
        return 0.0
    longest = max(len(line) for n in names for line in entry(n).splitlines())
    return longest * CHAR_WIDTH + 0.7


@dataclass
class Grid:
    """A figure's panels, and whether its legend is one for the figure (shared) or one
    beside each panel."""
    fig: object
    axes: list
    cols: int
    shared: bool
    panel_width: float                          # inches
    names: list = field(default_factory=list)   # the shared legend's names, in order

    def title(self, ax, text: str) -> None:
        """A panel's title, each of its lines wrapped to the panel's width."""
        ax.set_title("\n".join(wrap(line, self.panel_width) for line in text.splitlines()))

    def legend(self, orders: list[list[str]] | None = None) -> None:
        """The legends, from each panel's labelled artists, outside the plots: where shared,
        one beside the first row's last panel (the layout keeps that column's right margin
        for it), else one beside each panel (in `orders`' order of that panel's names, where
        given); none of only unnamed series."""
        seen: dict = {}
        for ax in self.axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(label, handle)
        if self.shared and seen:
            labels = [n for n in self.names if n in seen] + \
                [n for n in seen if n not in self.names]
            _beside(self.axes[min(self.cols, len(self.axes)) - 1],
                    [seen[n] for n in labels], labels)
        elif not self.shared:
            for i, ax in enumerate(self.axes):
                handles, labels = ax.get_legend_handles_labels()
                if orders and i < len(orders):
                    own = dict(zip(labels, handles))
                    labels = [n for n in orders[i] if n in own] + \
                        [n for n in labels if n not in orders[i]]
                    handles = [own[n] for n in labels]
                _beside(ax, handles, labels)


def _beside(ax, handles, labels) -> None:
    """A legend to the right of the panel, its top at the panel's."""
    if labels:
        ax.legend(handles, [entry(n) for n in labels], loc="upper left",
                  bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def grid(panels: int, panel_width: float, names: list[list[str]] = (),
         panel_height: float = PANEL_HEIGHT, title: str = "",
         narrowest: float | None = None) -> Grid:
    """A figure of `panels` axes, as many to a row as fit the page beside their legend,
    each panel_width wide or, to fit one more to a row, down to `narrowest`; names: each
    panel's legend names ('' for an unnamed series). One legend serves the figure where
    all its names number MAX_LEGEND or fewer."""
    names = [[n for n in ns if n] for ns in names] or [[]]
    union = list(dict.fromkeys(n for ns in names for n in ns))
    shared = len(union) <= MAX_LEGEND
    beside = legend_width(union) if shared else max(legend_width(ns) for ns in names)
    room = MAX_WIDTH - (beside if shared else 0)        # for the panels of a row
    extra = 0 if shared else beside                     # each panel's own legend
    least = min(narrowest or panel_width, panel_width)
    cols = max(1, min(panels, int(room // (least + extra))))
    panel_width = max(min(panel_width, room / cols - extra), 1.0)
    rows = math.ceil(panels / cols)
    width = min(MAX_WIDTH, cols * (panel_width + extra) + (beside if shared else 0))
    fig = plt.figure(figsize=(width, rows * panel_height + (0.5 if title else 0)),
                     layout="constrained")
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[panels:]:
        ax.remove()
    if title:           # over the plots, clear of a legend beside them from the top
        plots = width - (beside if shared else 0)
        fig.suptitle(wrap(title, plots, 11), x=plots / 2 / width)
    return Grid(fig, axes[:panels], cols, shared, panel_width, union)


def png(fig) -> bytes:
    """The figure as PNG at DPI, at the size grid gave it (no wider than the page)."""
    # Labels and titles may hold a path's or a name's undecodable bytes, which the font
    # code refuses: drawn as \xNN instead. Tick labels given as text are drawn afresh from
    # their formatter (a FuncFormatter, or a FixedFormatter before matplotlib 3.5), so its
    # texts are made printable too.
    for t in fig.findobj(matplotlib.text.Text):
        t.set_text(printable(t.get_text()))
    for axis in (a for ax in fig.axes for a in (ax.xaxis, ax.yaxis)):
        f = axis.get_major_formatter()
        if isinstance(f, matplotlib.ticker.FixedFormatter):
            f.seq = [printable(str(s)) for s in f.seq]
        elif isinstance(f, matplotlib.ticker.FuncFormatter):
            f.func = lambda x, pos=None, g=f.func: printable(str(g(x, pos)))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()
