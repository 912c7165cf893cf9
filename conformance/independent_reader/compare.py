"""Run the reader over conformance/cases/v1/* and compare per Appendix B.8 / case.json.
Usage: ../../.venv/bin/python compare.py [CASES_DIR]   (a stand-in until the official runner exists)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run")


class F(float):
    pass


def load(text):
    return json.loads(text, parse_float=lambda s: F(float(s)))


def eq(a, b, in_float=False):
    if isinstance(a, dict) and isinstance(b, dict):
        skip = {"value"} if a.get("type") in ("float", "complex") else set()
        ka, kb = set(a) - skip, set(b) - skip
        return ka == kb and all(eq(a[k], b[k]) for k in ka)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(eq(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, F) or isinstance(b, F):
        return isinstance(a, F) and isinstance(b, F) and (a == b and str(float(a)) == str(float(b)))
    if isinstance(a, int) or isinstance(b, int):
        return type(a) is int and type(b) is int and a == b
    return type(a) is type(b) and a == b


def find_ckpt(cdir, case):
    for n in sorted(os.listdir(cdir)):
        if n.startswith("checkpoint"):
            return os.path.join(cdir, n)
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "cases", "v1")
    npass = nfail = 0
    for name in sorted(os.listdir(root)):
        cdir = os.path.join(root, name)
        cj = os.path.join(cdir, "case.json")
        if not os.path.isfile(cj):
            continue
        with open(cj) as f:
            case = json.load(f)
        path = case.get("read_path") or ("checkpoint" if os.path.exists(os.path.join(cdir, "checkpoint")) else None)
        ck = os.path.join(cdir, path) if path else find_ckpt(cdir, case)
        p = subprocess.run([RUN, "read", ck], capture_output=True, text=True)
        ok, why = False, ""
        if case.get("valid"):
            exp_p = os.path.join(cdir, "expected.json")
            if p.returncode != 0:
                why = "rejected: " + (p.stderr.splitlines() or [""])[0]
            elif not os.path.exists(exp_p):
                ok, why = True, "(no expected.json)"
            else:
                with open(exp_p) as f:
                    ok = eq(load(p.stdout), load(f.read()))
                why = "" if ok else "rendering differs"
        else:
            want = case.get("error") or case.get("error_class") or case.get("expected_error")
            line = (p.stderr.splitlines() or [""])[0]
            got = line.split(": ")[1] if line.startswith("error: ") else None
            ok = p.returncode == 1 and got == want
            why = f"want {want}, got rc={p.returncode} {line}"
        print("PASS" if ok else "FAIL", name, "" if ok and not why.startswith("(") else why)
        npass += ok
        nfail += not ok
    print(f"{npass} passed, {nfail} failed")


if __name__ == "__main__":
    main()
