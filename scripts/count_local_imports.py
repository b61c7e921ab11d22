"""Count the imports written inside functions in evireform/ and kernels/ at a git revision:
``python scripts/count_local_imports.py REV`` (all of them, and those of the package's own
modules)."""
import ast, sys, subprocess
rev = sys.argv[1]
files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "evireform", "kernels"], capture_output=True, text=True).stdout.split()
tot = rel = 0
for f in files:
    if not f.endswith(".py"): continue
    src = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True).stdout
    t = ast.parse(src); top = {id(n) for n in t.body}
    for n in ast.walk(t):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top:
            tot += 1
            if isinstance(n, ast.ImportFrom) and n.level: rel += 1
print(rev, "function-local imports", tot, "of the package's own modules", rel)
