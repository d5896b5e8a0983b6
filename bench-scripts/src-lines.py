#!/usr/bin/env python3
"""Lines in src/ at git revisions: code (not blank, not a comment, not test-only), comments
and docs, and unit tests. Test-only is every item under `#[cfg(test)]` (a module, a fn, an
impl, a field) and every file such a module declares (`#[cfg(test)] mod tests;` makes
src/data/udp/tests.rs test-only).

    bench-scripts/src-lines.py 2982606 HEAD          # totals at each revision
    bench-scripts/src-lines.py --files 2982606 HEAD  # and the code lines each file gained

Issue 9 asks that src/ not grow apart from new features; this is the count it is held to.
"""
import os, re, subprocess, sys

DECL = re.compile(r"^(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")

def files(rev):
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"],
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.split() if f.endswith(".rs")]

def child_path(parent, name):
    """Where `mod name;` in `parent` lives (the 2018 layout: foo.rs -> foo/name.rs)."""
    d, base = os.path.split(parent)
    stem = base[:-3]
    folder = d if stem in ("mod", "lib", "main") else os.path.join(d, stem)
    return [os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")]

def kinds(text, path, test_files):
    """Each line's kind: "code", "comment", "test" or "blank". Adds the files its
    test-only `mod x;` declarations name to `test_files`."""
    lines = text.split("\n")
    if path in test_files:
        return ["test" if l.strip() else "blank" for l in lines]
    out = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line == "#[cfg(test)]":
            # The attribute, the item's doc and attributes, then the item: to its `;` or
            # to the brace that closes it.
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith(("///", "//", "#[")):
                j += 1
            m = DECL.match(lines[j].strip()) if j < len(lines) else None
            if m:
                test_files.update(child_path(path, m.group(3)))
            # A `,` or `;` ends an item without braces (a field, `mod x;`) only outside
            # parentheses: a fn whose parameters span lines goes on to its body.
            depth, parens, opened = 0, 0, False
            while j < len(lines):
                s = lines[j].strip()
                depth += s.count("{") - s.count("}")
                parens += s.count("(") - s.count(")")
                opened |= "{" in s
                if (opened and depth <= 0) or (
                        not opened and parens <= 0 and s.endswith((";", ","))):
                    break
                j += 1
            out += ["test" if l.strip() else "blank" for l in lines[i:j + 1]]
            i = j + 1
            continue
        out.append("blank" if not line else "comment" if line.startswith("//") else "code")
        i += 1
    return out[:len(lines)]

def count(text, path, test_files):
    """(code, comments, tests) of one file."""
    k = kinds(text, path, test_files)
    return k.count("code"), k.count("comment"), k.count("test")

def sources(rev):
    """Each .rs file under src/ at `rev`, and the set of test-only files among them."""
    texts = {f: subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True,
                               text=True, check=True).stdout for f in files(rev)}
    # The files that test-only modules declare (and those they declare in turn).
    test_files, seen = set(), None
    while seen != test_files:
        seen = set(test_files)
        for f, text in texts.items():
            kinds(text, f, test_files)
            if f in test_files:
                for line in text.split("\n"):
                    m = DECL.match(line.strip())
                    if m:
                        test_files.update(child_path(f, m.group(3)))
    return texts, test_files

def totals(rev):
    texts, test_files = sources(rev)
    return {f: count(text, f, test_files) for f, text in texts.items()}

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
