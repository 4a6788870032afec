#!/usr/bin/env python3
"""Runs a sample of a skill collection's scripts through `skillbox run`.

For docs/BENCHMARKS.md ("Real skills"): every skill the collection's root
indexes, every script under its scripts/ directory, a deterministic sample
of them (every k-th in path order), each run once with the default config
and `--help` (the one input every script accepts or refuses on its own),
and once directly on this host with the same argument, to tell what
skillbox refused from what the script itself needs: a script that exits
in the sandbox as it does on the host ("same as on the host") ran
faithfully. Prints one line a case and a summary by cause.

Usage: hack/real-skills.py SKILLBOX_BIN COLLECTION_DIR [SAMPLE_SIZE]
"""
import json
import os
import subprocess
import sys

INTERP = {".py": ["python3"], ".sh": ["bash"], ".js": ["node"], ".mjs": ["node"], ".cjs": ["node"]}


def cases(binary, root):
    out = subprocess.run([binary, "skills", "list", "--root", root, "--json"], capture_output=True, text=True, check=True).stdout
    found = []
    for sk in json.loads(out):
        skill_dir = os.path.dirname(sk["location"])
        scripts = os.path.join(skill_dir, "scripts")
        for dirpath, _, files in os.walk(scripts):
            for f in files:
                ext = os.path.splitext(f)[1]
                if ext in INTERP and not f.startswith("test_") and not f.startswith("_"):
                    found.append((sk["name"], os.path.relpath(os.path.join(dirpath, f), skill_dir), skill_dir))
    found.sort()
    return found


def classify(res, host):
    out = res.stdout + res.stderr
    if res.returncode == 0:
        return "pass"
    if "is denied by allowed-tools" in out or "outside the allowed-tools" in out:
        return "refused: allowed-tools"
    if "needs packages its image lacks" in out:
        # A package from an index the default config does not name: the
        # internet, which these machines do not reach.
        return "needs a package index (internet)"
    if "dependency" in out.lower() or "requirements" in out:
        return "refused: dependencies"
    if "PermissionError" in out:
        return "script: PermissionError"
    if res.returncode == host.returncode:
        # The script refuses --help, or needs what this host lacks too:
        # it behaves in the sandbox as it does in a shell.
        return "same as on the host (exit %d)" % host.returncode
    if "ModuleNotFoundError" in out or "Cannot find module" in out:
        return "module missing in the image"
    if "command not found" in out or "not found" in res.stderr:
        return "program missing in the image"
    return "other (exit %d, host %d)" % (res.returncode, host.returncode)


def main():
    binary, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    all_cases = cases(binary, root)
    step = max(1, len(all_cases) // size)
    sample = all_cases[::step][:size]
    print("%s: %d scripts in %d skills, %d sampled" % (os.path.basename(root), len(all_cases), len({c[0] for c in all_cases}), len(sample)))
    tally = {}
    for name, path, skill_dir in sample:
        res = subprocess.run([binary, "run", "--root", root, name, path, "--", "--help"], capture_output=True, text=True, timeout=600)
        ext = os.path.splitext(path)[1]
        host = subprocess.run(INTERP[ext] + [os.path.join(skill_dir, path), "--help"], capture_output=True, text=True, timeout=600, cwd="/tmp")
        why = classify(res, host)
        tally[why] = tally.get(why, 0) + 1
        detail = "" if why == "pass" else " | " + (res.stderr.strip().splitlines() or [""])[-1][:200]
        print("%-40s %-55s %s%s" % (name, path, why, detail), flush=True)
    print("summary:", json.dumps(tally, sort_keys=True))


if __name__ == "__main__":
    main()
