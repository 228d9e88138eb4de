"""SVG and HTML for `strata view`: Graphviz's `dot -Tsvg` when it is installed, else a layered
layout of strata's own; the HTML page embeds the SVG (no network, no scripts or styles from
elsewhere: one file to open in a browser)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

from strata.errors import StrataError
from strata.exporters.view import ViewGraph

NODE_H, ROW_GAP, COL_GAP, CHAR_W, LINE_H = 18, 56, 28, 6.2, 13


class RenderError(StrataError):
    """A picture that cannot be drawn."""


def dot_binary() -> str | None:
    return shutil.which("dot")


def svg_via_dot(dot_text: str, dot: str) -> str:
    """`dot -Tsvg` of the Graphviz text."""
    try:
        done = subprocess.run([dot, "-Tsvg"], input=dot_text.encode(), capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RenderError(f"{dot}: cannot run Graphviz: {e}") from None
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise RenderError(f"{dot} -Tsvg failed (exit {done.returncode}): {first}")
    text = done.stdout.decode()
    return text[text.index("<svg"):] if "<svg" in text else text


def _layers(g: ViewGraph) -> dict[str, int]:
    """Longest-path layering over the edges (back edges of a cycle ignored)."""
    succ: dict[str, list[str]] = {n: [] for n in g.nodes}
    indeg = {n: 0 for n in g.nodes}
    for e in g.edges:
        if e.src in succ and e.dst in indeg and e.src != e.dst:
            succ[e.src].append(e.dst)
            indeg[e.dst] += 1
    rank = {n: 0 for n in g.nodes}
    ready = [n for n in g.nodes if indeg[n] == 0]
    done: set[str] = set()
    while len(done) < len(g.nodes):
        if not ready:  # a cycle: take the first node not placed yet
            ready = [next(n for n in g.nodes if n not in done)]
        n = ready.pop(0)
        if n in done:
            continue
        done.add(n)
        for m in succ[n]:
            rank[m] = max(rank[m], rank[n] + 1)
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    return rank


def layout_svg(g: ViewGraph) -> str:
    """A layered drawing: rows by longest path, nodes as boxes, clusters as the boxes around
    their nodes, edges as lines with their labels."""
    rank = _layers(g)
    rows: dict[int, list[str]] = {}
    order = {n: i for i, n in enumerate(g.nodes)}
    for n in g.nodes:
        rows.setdefault(rank[n], []).append(n)
    size: dict[str, tuple[float, float]] = {}
    for nid, n in g.nodes.items():
        lines = n.label.split("\n")
        size[nid] = (max(40.0, CHAR_W * max(len(x) for x in lines) + 16), NODE_H + LINE_H * (len(lines) - 1) + 8)
    pos: dict[str, tuple[float, float]] = {}
    y, width = 20.0, 0.0
    for r in sorted(rows):
        x = 20.0
        tallest = max(size[n][1] for n in rows[r])
        for n in sorted(rows[r], key=lambda n: (g.nodes[n].cluster or "", order[n])):
            pos[n] = (x, y)
            x += size[n][0] + COL_GAP
        width = max(width, x)
        y += tallest + ROW_GAP
    height = y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="10">',
           f"<title>{html.escape(g.name)}</title>"]
    for cid, c in g.clusters.items():
        members = [n for n in g.nodes.values() if n.cluster == cid or _inside(g, n.cluster, cid)]
        if not members:
            continue
        x0 = min(pos[n.id][0] for n in members) - 8
        y0 = min(pos[n.id][1] for n in members) - 8 - LINE_H
        x1 = max(pos[n.id][0] + size[n.id][0] for n in members) + 8
        y1 = max(pos[n.id][1] + size[n.id][1] for n in members) + 8
        out.append(f'<g class="cluster"><rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
                   f'fill="none" stroke="#999" stroke-dasharray="4 2"/><text x="{x0 + 4:.1f}" y="{y0 + 11:.1f}" '
                   f'fill="#555">{html.escape(c.label.splitlines()[0])}</text></g>')
    for e in g.edges:
        if e.src not in pos or e.dst not in pos:
            continue
        (sx, sy), (dx, dy) = pos[e.src], pos[e.dst]
        x1, y1 = sx + size[e.src][0] / 2, sy + size[e.src][1]
        x2, y2 = dx + size[e.dst][0] / 2, dy
        dash = ' stroke-dasharray="5 3"' if e.style == "dashed" else ' stroke-width="2"' if e.style == "bold" else ""
        out.append(f'<g class="edge"><line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#333"{dash}/>'
                   f'<circle cx="{x2:.1f}" cy="{y2:.1f}" r="2.5" fill="#333"/>'
                   + (f'<text x="{(x1 + x2) / 2 + 3:.1f}" y="{(y1 + y2) / 2:.1f}" font-size="9" fill="#246">'
                      f"{html.escape(e.label)}</text>" if e.label else "") + "</g>")
    for nid, n in g.nodes.items():
        (x, y), (w, h) = pos[nid], size[nid]
        rx = h / 2 if n.shape in ("ellipse", "circle") else 3
        out.append(f'<g class="node"><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx:.1f}" '
                   f'fill="#fff" stroke="#000"/>')
        for k, line in enumerate(n.label.split("\n")):
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + 13 + LINE_H * k:.1f}" text-anchor="middle">'
                       f"{html.escape(line)}</text>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _inside(g: ViewGraph, cluster: str | None, outer: str) -> bool:
    seen = set()
    while cluster is not None and cluster in g.clusters and cluster not in seen:
        seen.add(cluster)
        cluster = g.clusters[cluster].parent
        if cluster == outer:
            return True
    return False


def html_page(title: str, svg: str, summary: str) -> str:
    """A self-contained page: the SVG inline (its XML prologue and namespace declarations
    dropped: HTML5 knows inline SVG), a little inline CSS, nothing fetched."""
    svg = svg[svg.index("<svg"):] if "<svg" in svg else svg
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(title)}</title>\n"
        "<style>body{font-family:sans-serif;margin:12px;background:#fafafa}"
        ".graph{overflow:auto;border:1px solid #ccc;background:#fff}</style>\n"
        "</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(summary)}</p>\n"
        f"<div class=\"graph\">\n{svg}</div>\n</body>\n</html>\n"
    )
