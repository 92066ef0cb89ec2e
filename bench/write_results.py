#!/usr/bin/env python3
"""Puts a new bench/run.sh report on top of bench/RESULTS.md and keeps every earlier run below it.

    python3 bench/write_results.py RESULTS.md REPORT.md

The report starts with `## Latest run (DATE)`. The run it replaces moves, headings one level down and
titled `### Run of DATE`, to the top of `## Earlier runs`. A file written before this script existed
(no markers) keeps everything under its title as the oldest entry of `## Earlier runs`, headings two
levels down under `### Before bench/run.sh wrote this file`."""
import re, sys

TITLE = "# Benchmark and soak results"
START = "<!-- latest run: bench/run.sh replaces this block and moves it under Earlier runs -->"
END = "<!-- end of latest run -->"
EARLIER = "## Earlier runs"
INTRO = ("`make bench` (bench/run.sh, see [docs/testing.md](../docs/testing.md)) writes its report on top of this "
         "file; the run it replaces moves to the top of \"Earlier runs\", which also keeps the figures recorded "
         "before (the soak's included).")

def demote(text, levels):
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,5} ", line):
            line = "#" * levels + line
        out.append(line)
    return "\n".join(out).strip("\n")

def main():
    path, report_path = sys.argv[1], sys.argv[2]
    report = open(report_path, encoding="utf-8").read().strip("\n")
    try:
        old = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        old = ""
    earlier = []
    if START in old and END in old:
        latest = old.split(START, 1)[1].split(END, 1)[0].strip("\n")
        latest = re.sub(r"^## Latest run \((.*)\)$", r"## Run of \1", latest, count=1, flags=re.M)
        earlier.append(demote(latest, 1))
        rest = old.split(END, 1)[1]
        if EARLIER in rest:
            rest = rest.split(EARLIER, 1)[1]
        if rest.strip():
            earlier.append(rest.strip("\n"))
    elif old.strip():
        body = old.split("\n", 1)[1] if old.startswith("# ") else old
        earlier.append("### Before bench/run.sh wrote this file\n\n" + demote(body, 2))
    parts = [TITLE, INTRO, START, report, END]
    if earlier:
        parts += [EARLIER, "\n\n".join(earlier)]
    open(path, "w", encoding="utf-8").write("\n\n".join(parts) + "\n")

if __name__ == "__main__":
    main()
