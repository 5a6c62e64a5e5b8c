#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Renders a Kareus report.html in headless Chromium and checks what a person would see.

usage: render_check.py REPORT.html OUT_DIR [--timetable]

Checks: the DOM Chromium built holds the report's SVG plots (frontier, timeline, partition
frontiers; with --timetable, kareus schedule's power and signal plots) and its tables (the plan
files' table among them), no two text labels of one plot overlap in Chromium's layout, and the
screenshot is not blank (a real share of pixels is neither white nor one flat colour). Exit 0 on success, 1 with a reason otherwise, 77 (CTest skip) when
no Chromium is installed.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run(browser, args, profile):
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG into (width, height, channels, rows)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour {color})")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


# Appended to a copy of the report: every pair of text labels (or legend swatches) of one SVG
# plot whose boxes intersect (more than a pixel each way) is written into the DOM, which --dump-dom returns.
OVERLAP_SCRIPT = """<script>
window.addEventListener('load', () => {
  const found = [];
  document.querySelectorAll('svg').forEach((svg, plot) => {
    // Labels, and the legends' colour swatches (12 x 12 squares).
    const swatches = [...svg.querySelectorAll('rect')].filter(
        r => r.getAttribute('width') === '12' && r.getAttribute('height') === '12');
    const boxes = [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()])
        .concat(swatches.map(r => ['legend swatch', r.getBoundingClientRect()]));
    for (let i = 0; i < boxes.length; ++i) for (let j = i + 1; j < boxes.length; ++j) {
      const [a, p] = boxes[i], [b, q] = boxes[j];
      const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (w > 1 && h > 1) found.push('plot ' + plot + ': ' + JSON.stringify(a) + ' overlaps ' + JSON.stringify(b));
    }
  });
  const pre = document.createElement('pre');
  pre.id = 'label-overlaps';
  pre.textContent = found.length ? found.join('\\n') : 'none';
  document.body.appendChild(pre);
});
</script>"""


def label_overlaps(browser, report):
    """The overlapping label pairs Chromium's layout finds in the report's plots."""
    with tempfile.TemporaryDirectory() as work:
        copy = os.path.join(work, "report.html")
        html = open(report, encoding="utf-8").read()
        open(copy, "w", encoding="utf-8").write(html.replace("</body>", OVERLAP_SCRIPT + "</body>"))
        profile = os.path.join(work, "profile")
        dom = run(browser, ["--dump-dom", "file://" + copy], profile)
    start = dom.stdout.find('<pre id="label-overlaps">')
    if start < 0:
        return ["the overlap check did not run: " + dom.stderr[-500:]]
    text = dom.stdout[start + len('<pre id="label-overlaps">'):dom.stdout.find("</pre>", start)]
    return [] if text == "none" else text.split("\n")


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--timetable"):
        print(__doc__)
        return 2
    report, out_dir = os.path.abspath(sys.argv[1]), sys.argv[2]
    timetable = len(sys.argv) == 4
    browser = chromium()
    if browser is None:
        print("SKIP: no chromium installed")
        return 77
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        dom = run(browser, ["--dump-dom", "file://" + report], profile)
    if dom.returncode != 0:
        print("chromium --dump-dom failed:", dom.stderr[-2000:])
        return 1
    html = dom.stdout
    svgs = html.count("<svg")
    wanted = 2 if timetable else 3
    if svgs < wanted:
        print(f"expected at least {wanted} SVG plots in the rendered DOM, found {svgs}")
        return 1
    needles = (("<table", "Power and signal over time", "Intervals", "<polyline") if timetable else
               ("<table", "Max-throughput", "timeline", "Partition frontiers", "<polyline", "<rect",
                "Plan files: which plan to run"))
    for needle in needles:
        if needle not in html:
            print(f"rendered DOM lacks {needle!r}")
            return 1
    overlaps = label_overlaps(browser, report)
    if overlaps:
        print(f"{len(overlaps)} overlapping labels in the plots, e.g.:", *overlaps[:8], sep="\n  ")
        return 1
    shot = os.path.join(out_dir, "report.png")
    size = "--window-size=1100,900" if timetable else "--window-size=1280,2400"
    with tempfile.TemporaryDirectory() as profile:
        res = run(browser, [f"--screenshot={shot}", size, "file://" + report], profile)
    if res.returncode != 0 or not os.path.exists(shot):
        print("chromium --screenshot failed:", res.stderr[-2000:])
        return 1
    width, height, channels, rows = png_pixels(shot)
    total, non_white, colours = 0, 0, set()
    for y in range(0, height, 4):
        row = rows[y]
        for x in range(0, width, 4):
            px = tuple(row[x * channels:x * channels + 3])
            total += 1
            if px != (255, 255, 255):
                non_white += 1
            if len(colours) < 64:
                colours.add(px)
    share = non_white / max(total, 1)
    print(f"screenshot {width}x{height}: {share:.1%} non-white sampled pixels, "
          f"{len(colours)}+ distinct colours, {svgs} SVGs")
    if share < 0.02 or len(colours) < 8:
        print("the screenshot looks blank")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
