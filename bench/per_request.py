#!/usr/bin/env python3
"""Per-request cost by function: the difference between two callgrind profiles of the same proxy,
one after N requests and one after 2N (start-up cancels out), divided by N.

    bench/per_request.py PROFILE_N PROFILE_2N N [ROWS]     (profiles from COST_PROFILES=DIR bench/cost.sh)
"""
import re, subprocess, sys

def load(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in out.splitlines():
        match = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)  (?!=>|\*)(.*?)(\s\[.*\])?$", line)
        if not match:
            continue
        name = match.group(2).strip()
        if not name.startswith("???"):
            name = re.sub(r"^[^:]*:(?=\S)", "", name, count=1)
        name = re.sub(r"33_[0-9A-F]{32}LL", "", name)
        costs[name] = costs.get(name, 0) + int(match.group(1).replace(",", ""))
    return costs

def main():
    first, second, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    delta = {name: (second.get(name, 0) - first.get(name, 0)) / n for name in set(first) | set(second)}
    print(f"{sum(delta.values()):10.0f}  instructions per request in all")
    for name, cost in sorted(delta.items(), key=lambda item: -item[1])[:rows]:
        demangled = subprocess.run(["swift", "demangle", "--simplified", "--compact", name.split(" ")[0]],
                                   capture_output=True, text=True).stdout.strip() if name.startswith("$s") else name
        print(f"{cost:10.0f}  {demangled[:150]}")

main()
