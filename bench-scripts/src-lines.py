#!/usr/bin/env python3
"""Lines in src/ at git revisions: code (not blank, not a comment, not inside a
`#[cfg(test)]` module), comments and docs, and unit tests.

    bench-scripts/src-lines.py 2982606 HEAD          # totals at each revision
    bench-scripts/src-lines.py --files 2982606 HEAD  # and the code lines each file gained

Issue 9 asks that src/ not grow apart from new features; this is the count it is held to.
"""
import subprocess, sys

def files(rev):
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"],
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.split() if f.endswith(".rs")]

def count(text):
    code = comments = tests = 0
    in_tests = False
    depth = 0
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not in_tests and line == "#[cfg(test)]" and i + 1 < len(lines) and \
                lines[i + 1].strip().startswith(("mod tests", "pub(crate) mod tests", "mod ")) and \
                lines[i + 1].strip().endswith("{"):
            in_tests, depth = True, 0
        if in_tests:
            tests += bool(line)
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                in_tests = False
        elif not line:
            pass
        elif line.startswith("//"):
            comments += 1
        else:
            code += 1
        i += 1
    return code, comments, tests

def totals(rev):
    per = {}
    for f in files(rev):
        text = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True,
                              text=True, check=True).stdout
        per[f] = count(text)
    return per

if __name__ == "__main__":
    args = sys.argv[1:]
    by_file = "--files" in args
    revs = [a for a in args if a != "--files"] or ["HEAD"]
    seen = [totals(rev) for rev in revs]
    for rev, per in zip(revs, seen):
        c, d, t = (sum(v[k] for v in per.values()) for k in range(3))
        print(f"{rev:>10}: code {c:6}  comments {d:6}  unit tests {t:6}  files {len(per)}")
    if by_file and len(seen) > 1:
        a, b = seen[0], seen[-1]
        for f in sorted(set(a) | set(b)):
            ca, cb = a.get(f, (0, 0, 0))[0], b.get(f, (0, 0, 0))[0]
            if ca != cb:
                print(f"  {f:30} {ca:6} {cb:6} {cb - ca:+6}")
