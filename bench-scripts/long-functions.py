#!/usr/bin/env python3
"""Functions in src/ longer than a limit (default 80 lines), longest first, test modules
left out: `python3 bench-scripts/long-functions.py [LIMIT]`. A function is counted from its
`fn` line to the line that closes its body, by brace depth (strings and comments with
braces are rare enough here not to matter)."""
import os, re, sys

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 80
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
FN = re.compile(r"^\s*(pub(\([a-z]+\))?\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")

found = []
for dirpath, _, files in os.walk(ROOT):
    for name in files:
        if not name.endswith(".rs") or name == "tests.rs":
            continue
        path = os.path.join(dirpath, name)
        lines = open(path, encoding="utf-8").read().split("\n")
        # Stop at the test module.
        for i, line in enumerate(lines):
            if line.startswith("#[cfg(test)]") and i + 1 < len(lines) and "mod tests" in lines[i + 1]:
                lines = lines[:i]
                break
        i = 0
        while i < len(lines):
            m = FN.match(lines[i])
            if not m:
                i += 1
                continue
            depth, start, j, opened = 0, i, i, False
            while j < len(lines):
                code = lines[j].split("//")[0]
                depth += code.count("{") - code.count("}")
                opened |= "{" in code
                if opened and depth <= 0:
                    break
                if not opened and code.rstrip().endswith(";"):
                    break
                j += 1
            length = j - start + 1
            if length > LIMIT:
                found.append((length, os.path.relpath(path, os.path.join(ROOT, "..")), start + 1, m.group(5)))
            i = j + 1 if opened else i + 1
for length, path, line, fn in sorted(found, reverse=True):
    print(f"{length:5d}  {path}:{line}  {fn}")
print(f"{len(found)} functions over {LIMIT} lines", file=sys.stderr)
