"""Scratch (removed after the device runs): execute every code cell of the solution notebook, tests included."""
import sys, time, traceback, os
sys.path.insert(0, os.getcwd())
import matplotlib; matplotlib.use("Agg")
import nbformat
nb = nbformat.read("solutions/07_matmul_relu/07_matmul_relu.ipynb", as_version=4)
import linecache
ns = {"__name__": "__course_notebook__"}
for i, c in enumerate(nb.cells):
    if c.cell_type != "code":
        continue
    gid = c.metadata.get("nbgrader", {}).get("grade_id", "")
    t = time.time()
    print(f"===== cell {i} {gid}", flush=True)
    try:
        src = "\n".join(l for l in c.source.splitlines() if not l.lstrip().startswith(("%", "!")))
        fname = f"<notebook-cell-{i}>"
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
        exec(compile(src, fname, "exec"), ns)
    except Exception:
        traceback.print_exc(limit=3)
    print(f"----- cell {i} took {time.time() - t:.1f} s", flush=True)
