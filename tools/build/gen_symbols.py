#!/usr/bin/env python3
"""gen_symbols.py OUT.map HEADER... — the linker version script of a shared library: every
function the given public headers declare is exported (version node CKPT_0), everything else
(the internal functions, which share the ckpt_ prefix) stays local.  Built by meson from the
installed headers, so the exported set follows them."""
import re
import sys

DECL = re.compile(r"^(?!static|typedef|#|\s|/|\*)[A-Za-z_][\w\s\*]*?\b(ckpt_\w+)\s*\(", re.M)


def names(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return DECL.findall(text)


def main():
    out, headers = sys.argv[1], sys.argv[2:]
    syms = sorted({n for h in headers for n in names(h)})
    if not syms:
        sys.exit("gen_symbols: no function found in " + " ".join(headers))
    with open(out, "w", encoding="utf-8") as f:
        f.write("CKPT_0 {\n  global:\n")
        for s in syms:
            f.write(f"    {s};\n")
        f.write("  local:\n    *;\n};\n")


if __name__ == "__main__":
    main()
