import os
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))
OUT = os.environ.get('OUT', '/tmp/issue9-lines')
os.makedirs(OUT, exist_ok=True)
import collections
rules = collections.defaultdict(dict)
for l in open(os.path.join(HERE, 'rules.txt')):
    l = l.split('#')[0].strip()
    if not l: continue
    f, s, rng, cat = l.split()
    for part in rng.split(','):
        a, _, b = part.partition('-')
        for n in range(int(a), int(b or a)+1):
            key = (f, s, n)
            if n in rules[(f, s)] and rules[(f, s)][n] != cat:
                print('CONFLICT', f, s, n, rules[(f,s)][n], cat)
            rules[(f, s)][n] = cat
used = set()
rows = []
for l in open(os.path.join(OUT, 'raw.tsv')):
    f, s, n, t = l.rstrip('\n').split('\t', 3)
    n = int(n)
    cat = rules[(f, s)].get(n, 'refactor')
    if n in rules[(f, s)]: used.add((f, s, n))
    rows.append((f, s, n, cat, t))
for (f, s), d in rules.items():
    for n in d:
        if (f, s, n) not in used: print('UNUSED rule (not a code diff line)', f, s, n)
with open(os.path.join(OUT, 'lines.tsv'), 'w') as fh:
    fh.write('file\tsign\tline\tcategory\ttext\n')
    for r in rows: fh.write('\t'.join(map(str, r)) + '\n')
cats = ['a','b','c','d','e','refactor']
add = collections.Counter(); rem = collections.Counter(); per = collections.Counter()
for f, s, n, c, t in rows:
    (add if s == '+' else rem)[c] += 1
    if c == 'refactor': per[f] += 1 if s == '+' else -1
print(f"{'cat':10}{'added':>7}{'removed':>8}{'net':>6}")
for c in cats: print(f"{c:10}{add[c]:7}{rem[c]:8}{add[c]-rem[c]:+6}")
print(f"{'total':10}{sum(add.values()):7}{sum(rem.values()):8}{sum(add.values())-sum(rem.values()):+6}")
print('refactor net per file:')
for f, v in sorted(per.items(), key=lambda x: -x[1]): print(f'  {f:28}{v:+5}')
