#!/usr/bin/env python3
"""Checks what headless Chromium rendered of `ferry demo --report`: the DOM it dumped and its screenshot.

Usage: check-timeline.py DOM.html SCREENSHOT.png

The DOM must hold one track per scenario user, the launch storm reading "ten triggers, one run"
with ten trigger markers ended by a fate and one run bar, the crash's unfinished run, the hostile
network's waits and refused requests, the merges of the queued events, the team's two phones, a table row per event,
and nothing that runs or loads. The screenshot must be the page drawn: the colours of the launch
storm's markers, run bar and request among its pixels.
"""

import re
import struct
import sys
import zlib
from html.parser import HTMLParser

FINAL_FATES = {"fate-startedRun", "fate-coalescedIntoRun", "fate-ignored"}


class Page(HTMLParser):
    """Tracks of the page: title, headline, element classes in its plots, table rows, event count."""

    def __init__(self):
        super().__init__()
        self.tracks = []
        self.scripts = 0
        self.style = ""
        self._in_style = False
        self.fetches = []
        self.texts = []
        self._capture = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script":
            self.scripts += 1
        self._in_style = tag == "style"
        for name, value in attributes.items():
            if name in ("src", "href", "xlink:href", "srcset", "action", "style") or name.startswith("on"):
                self.fetches.append(f"<{tag} {name}={value}>")
        classes = attributes.get("class", "").split()
        if tag == "section" and "track" in classes:
            self.tracks.append({"title": "", "headline": "", "shapes": [], "rows": 0, "summary": "", "labels": []})
        if not self.tracks:
            return
        track = self.tracks[-1]
        if tag == "h2":
            self._capture = "title"
        elif tag == "p" and "headline" in classes:
            self._capture = "headline"
        elif tag == "summary":
            self._capture = "summary"
        elif tag == "text" and {"run-label", "progress-label"} & set(classes):
            self._capture = "labels"
        elif tag in ("circle", "rect", "polygon") and classes:
            track["shapes"].append(set(classes))
        elif tag == "tr" and "event" in classes:
            track["rows"] += 1

    def handle_endtag(self, tag):
        if tag in ("h2", "p", "summary", "text"):
            self._capture = None

    def handle_data(self, data):
        self.texts.append(data)
        if self._in_style:
            self.style += data
        if self._capture and self.tracks:
            track = self.tracks[-1]
            if self._capture == "labels":
                track["labels"].append(data)
            else:
                track[self._capture] += data


def count(track, *classes):
    return sum(1 for shape in track["shapes"] if set(classes) <= shape)


def check_dom(path, failures):
    page = Page()
    with open(path, encoding="utf-8") as file:
        page.feed(file.read())
    if "url(" in page.style or "@import" in page.style:
        failures.append("the page's style fetches something (url() or @import); it must fetch nothing")
    if page.scripts:
        failures.append(f"the page runs {page.scripts} script(s); it must run none")
    if page.fetches:
        failures.append(f"the page loads or runs {page.fetches[:3]}; it must do neither")
    tracks = {track["title"]: track for track in page.tracks}
    expected = ["launch-storm: maya", "queued-events: sam", "crash-recovery: lee, before the crash and after",
                "account-switch: ben", "account-switch: ana, back", "hostile-network: kim",
                "team-spaces: dispatcher", "team-spaces: worker",
                "photos-from-the-field: worker", "photos-from-the-field: dispatcher"]
    missing = [title for title in expected if title not in tracks]
    if missing:
        failures.append(f"tracks missing: {missing} (the page has {list(tracks)})")
        return
    for track in page.tracks:
        events = re.match(r"([\d,]+|\w+) events?,", track["summary"])
        words = {"no": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                 "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
        stated = None
        if events:
            stated = words[events.group(1)] if events.group(1) in words else int(events.group(1).replace(",", ""))
        if stated != track["rows"]:
            failures.append(f"{track['title']}: the table says {track['summary']!r} and has {track['rows']} rows")

    storm = tracks["launch-storm: maya"]
    if storm["headline"] != "ten triggers, one run":
        failures.append(f"launch storm headline: {storm['headline']!r}, not 'ten triggers, one run'")
    ended = sum(1 for shape in storm["shapes"] if "trigger" in shape and shape & FINAL_FATES)
    if ended != 10:
        failures.append(f"launch storm: {ended} trigger markers ended by a fate, not 10")
    if count(storm, "run") != 1 or count(storm, "run", "run-succeeded") != 1:
        failures.append(f"launch storm: {count(storm, 'run')} run bars, not one that succeeded")
    if count(storm, "offline") < 1:
        failures.append("launch storm: the link flaps are not drawn as time offline")
    if not any(label.startswith("Starting up: 100%") for label in storm["labels"]):
        failures.append(f"launch storm: the start-up's last progress is not labelled: {storm['labels']}")

    crash = tracks["crash-recovery: lee, before the crash and after"]
    if count(crash, "run", "run-unfinished") != 1 or count(crash, "run", "run-succeeded") != 1:
        failures.append("crash recovery: the run the crash cut is not drawn unfinished beside the run that recovered")

    hostile = tracks["hostile-network: kim"]
    if count(hostile, "wait") < 1 or count(hostile, "request-limited") < 1:
        failures.append("hostile network: the waits and the 429 answers are not drawn")

    queued = tracks["queued-events: sam"]
    if count(queued, "merged") < 1:
        failures.append("queued events: the merges are not drawn")
    if "Synced 5,000 of 5,000 (100%)" not in queued["labels"]:
        failures.append(f"queued events: the upload's last progress is not labelled: {queued['labels']}")


def pixels(path):
    """The screenshot's size and its set of RGB colours (8-bit RGB or RGBA PNG, not interlaced)."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        chunk = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        position += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unexpected PNG format: depth {depth}, colour type {colour}, interlace {interlace}")
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colours = set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + predictor) & 0xFF
        for i in range(0, stride, channels):
            colours.add(bytes(line[i:i + 3]))
        previous = line
    return width, height, colours


def check_screenshot(path, failures):
    try:
        width, height, colours = pixels(path)
    except (OSError, ValueError, zlib.error) as error:
        failures.append(f"screenshot {path}: {error}")
        return
    if (width, height) != (1200, 1000):
        failures.append(f"screenshot is {width}x{height}, not the 1200x1000 window")
    drawn = {"trigger that started a run": "0969da", "coalesced trigger": "54aeff", "succeeded run": "aceebb",
             "answered request": "1a7f37"}
    for name, colour in drawn.items():
        if bytes.fromhex(colour) not in colours:
            failures.append(f"screenshot: no pixel of the {name} (#{colour}); the page was not drawn as it should be")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check-timeline.py DOM.html SCREENSHOT.png")
    failures = []
    check_dom(sys.argv[1], failures)
    check_screenshot(sys.argv[2], failures)
    if failures:
        print("check-timeline: the rendered timeline is wrong:", file=sys.stderr)
        for failure in failures:
            print(f"  - {failure}", file=sys.stderr)
        sys.exit(1)
    print(f"check-timeline: the page rendered as it should ({sys.argv[1]}, {sys.argv[2]})")


if __name__ == "__main__":
    main()
