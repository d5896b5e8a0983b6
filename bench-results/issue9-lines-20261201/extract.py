import os
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))
OUT = os.environ.get('OUT', '/tmp/issue9-lines')
os.makedirs(OUT, exist_ok=True)
import subprocess, re, sys, json
sys.path.insert(0, os.path.join(ROOT, 'bench-scripts'))
import importlib.util
spec = importlib.util.spec_from_file_location('sl', os.path.join(ROOT, 'bench-scripts', 'src-lines.py'))
sl = importlib.util.module_from_spec(spec); spec.loader.exec_module(sl)
A, B = '2982606', '9769bb6'
G = ['git', '-C', ROOT]
def flags(text, path, test_files):
    """Each line, and whether src-lines.py counts it as code."""
    return text.split("\n"), [k == "code" for k in sl.kinds(text, path, test_files)]

testfiles = sl.sources

ta, tfa = testfiles(A); tb, tfb = testfiles(B)
ren = {'src/net/mod.rs': 'src/net.rs', 'src/net/sys.rs': 'src/sys.rs'}
pairs = []
for f in sorted(set(ta) | set(tb)):
    if f in ren: pairs.append((f, ren[f])); continue
    if f in ren.values(): continue
    pairs.append((f if f in ta else None, f if f in tb else None))
out = []
tot = 0
for fa, fb in pairs:
    la, fla = flags(ta.get(fa, ''), fa, tfa) if fa else ([], [])
    lb, flb = flags(tb.get(fb, ''), fb, tfb) if fb else ([], [])
    # diff via git diff --no-index on temp files
    open(os.path.join(OUT, 'a.rs'),'w').write(ta.get(fa,'') if fa else '')
    open(os.path.join(OUT, 'b.rs'),'w').write(tb.get(fb,'') if fb else '')
    d = subprocess.run(['git','diff','--no-index','--histogram','-U0',os.path.join(OUT, 'a.rs'),os.path.join(OUT, 'b.rs')],capture_output=True,text=True).stdout
    name = fb or fa
    ia=ib=0
    for m in re.finditer(r'^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@', d, re.M):
        a0, ac, b0, bc = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
        sa = a0-1 if ac else a0
        sb = b0-1 if bc else b0
        while ia < sa:
            if fla[ia] != flb[ib]:
                out.append((name, '-' if fla[ia] else '+', (ia if fla[ia] else ib)+1, la[ia]+'   ##FLAGCHANGE'))
            ia+=1; ib+=1
        ia = sa+ac; ib = sb+bc
        a0, ac, b0, bc = int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)
        for k in range(ac):
            i = a0-1+k
            if fla[i]: out.append((name, '-', i+1, la[i]))
        for k in range(bc):
            i = b0-1+k
            if flb[i]: out.append((name, '+', i+1, lb[i]))
    while ia < len(la) and ib < len(lb):
        if fla[ia] != flb[ib]:
            out.append((name, '-' if fla[ia] else '+', (ia if fla[ia] else ib)+1, la[ia]+'   ##FLAGCHANGE'))
        ia+=1; ib+=1
    net = sum(1 for o in out if o[0]==name and o[1]=='+') - sum(1 for o in out if o[0]==name and o[1]=='-')
    tot += net
    print(f'{name:28} +{sum(1 for o in out if o[0]==name and o[1]=="+"):4} -{sum(1 for o in out if o[0]==name and o[1]=="-"):4} net {net:+}')
print('total', tot)
with open(os.path.join(OUT, 'raw.tsv'),'w') as fh:
    for n, s, ln, t in out: fh.write(f'{n}\t{s}\t{ln}\t{t}\n')
