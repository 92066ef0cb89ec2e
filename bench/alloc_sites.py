#!/usr/bin/env python3
"""Allocations per request by call site: the difference between two valgrind dhat profiles of the
same configuration (N and 2N requests, from `COST_PROFILES=DIR bench/cost.sh`), divided by N.
A site is the innermost frame in scopeproxy's own sources (Sources/...), with its caller.

    bench/alloc_sites.py DIR/full.1.dhat DIR/full.2.dhat 400
"""
import json, os, re, sys
from collections import Counter

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources")
OUR_FILES = {name for _, _, files in os.walk(SOURCES) for name in files if name.endswith(".swift")}

def is_ours(frame):
    match = re.search(r"\((\w+\.swift):\d+\)$", frame)
    return bool(match) and match.group(1) in OUR_FILES

def sites(path):
    profile = json.load(open(path))
    frames = profile["ftbl"]
    counts = Counter()
    for point in profile["pps"]:
        names = [frames[index] for index in point["fs"]]
        ours = [i for i, name in enumerate(names) if is_ours(name)]
        if ours:
            first = ours[0]
            label = " <- ".join(shorten(names[i]) for i in ours[:2])
        else:
            label = shorten(names[1] if len(names) > 1 else names[0])
        counts[label] += point["tbk"]
    return counts

def shorten(frame):
    # "0x...: function (in /path) or (file.swift:line)" -> "function (file:line)"
    match = re.match(r"0x[0-9A-F]+: (.*?) \((?:in )?(.*)\)$", frame)
    if not match:
        return frame
    function, where = match.groups()
    return f"{function[:90]} ({where.rsplit('/', 1)[-1]})"

first, second, requests = sites(sys.argv[1]), sites(sys.argv[2]), int(sys.argv[3])
rows = sorted(((second[k] - first.get(k, 0)) / requests, k) for k in second)
total = sum(value for value, _ in rows)
print(f"{total:8.1f}  allocations per request in all")
for value, label in reversed(rows):
    if value >= 0.5:
        print(f"{value:8.1f}  {label}")
