#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Renders a Kareus report.html in headless Chromium and checks what a person would see.

usage: render_check.py REPORT.html OUT_DIR [--timetable]

Checks: the DOM Chromium built holds the report's SVG plots (frontier, timeline, partition
frontiers; with --timetable, kareus schedule's power and signal plots) and its tables, and the screenshot is not blank (a real share of pixels is neither
white nor one flat colour). Exit 0 on success, 1 with a reason otherwise, 77 (CTest skip) when
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
               ("<table", "Max-throughput", "timeline", "Partition frontiers", "<polyline", "<rect"))
    for needle in needles:
        if needle not in html:
            print(f"rendered DOM lacks {needle!r}")
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
