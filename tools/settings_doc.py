#!/usr/bin/python3
"""settings_doc.py - hold docs/configuration.md to the settings table (issue 45).

    tools/settings_doc.py [--sluiced build/sluiced] [--doc docs/configuration.md]

Reads the table from `sluiced --print-settings` (node/settings.c: KEY TAB TYPE TAB DEFAULT TAB
MEANING a line; an alias as ALIAS TAB alias TAB TAB KEY) and the key tables of the page (the
Markdown tables whose first column is "key"), and prints every difference, exit 1 when any:
  - a key (or alias) of the table that the page does not list;
  - a key the page lists that the table lacks;
  - a default the page gives that is not the table's (keys of a TLS group excepted: the page
    describes them together).
The page is written by hand; only its tables are read. In a first column every `key` counts
(`key = value` counts as key); `.x` or `_x` after a key stands for that key with its last part
(after its last '.', or its last as many '_'-parts) replaced. A default column holds one
default for every key of the row, or one per key separated by ", ". Tables whose second column
is "same as" list aliases (no defaults). /usr/bin/python3's standard library only.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def read_table(sluiced):
    """keys: key -> (type, default, meaning); aliases: alias -> key; groups: prefixes."""
    out = subprocess.run([str(sluiced), "--print-settings"], check=True, capture_output=True,
                         text=True).stdout
    keys, aliases, groups = {}, {}, []
    for line in out.splitlines():
        key, typ, default, meaning = line.split("\t")
        if typ == "alias":
            aliases[key] = meaning
        else:
            keys[key] = (typ, default, meaning)
            if typ == "group":
                groups.append(key[:-1])  # "ssl_options." of "ssl_options.*"
    return keys, aliases, groups


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def expand(names):
    """`a.b`, `.c`, `_d` -> a.b, a.c, ... (shorthands relative to the row's first key)."""
    out = []
    for n in names:
        n = n.split(" = ")[0].strip()
        if out and n[:1] == ".":
            base = out[0]
            n = base[:base.rfind(".")] + n
        elif out and n[:1] == "_":
            base, parts = out[0], n.count("_")
            cut = len(base)
            for _ in range(parts):
                cut = base.rfind("_", 0, cut)
            n = base[:cut] + n
        out.append(n)
    return out


def read_doc(path):
    """[(line number, keys, defaults or None)] of every key table row."""
    rows = []
    header = None
    for no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        c = cells(line)
        if header is None:
            header = c
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        if not header or header[0] != "key":
            continue
        keys = expand(re.findall(r"`([^`]+)`", c[0]))
        if header[1] == "default":
            rows.append((no, keys, c[1].replace("`", "").strip()))
        else:
            rows.append((no, keys, None))
    return rows


def check(keys, aliases, groups, rows):
    problems = []
    listed = {}
    for no, names, defaults in rows:
        if defaults is None:
            per = [None] * len(names)
        elif len(names) == 1:
            per = [defaults]
        else:
            split = [d.strip() for d in defaults.split(", ")] if defaults else []
            if len(split) == len(names):
                per = split
            elif len(split) <= 1:
                per = [defaults] * len(names)
            else:
                per = [None] * len(names)
                if not all(any(n.startswith(g) for g in groups) for n in names):
                    problems.append("line %d: %d defaults for %d keys" % (no, len(split),
                                                                           len(names)))
        for name, default in zip(names, per):
            listed.setdefault(name, no)
            in_group = any(name.startswith(g) and name != g + "*" for g in groups)
            if name in aliases:
                continue
            if name not in keys:
                problems.append("line %d: `%s` is not a key sluiced knows" % (no, name))
                continue
            if (default is not None and not in_group
                    and default != keys[name][1].replace("`", "")):
                problems.append("line %d: `%s` default %r, the table says %r"
                                % (no, name, default, keys[name][1]))
    for name in list(keys) + list(aliases):
        if name in listed:
            continue
        if keys.get(name, ("",))[0] == "group":
            if any(k.startswith(name[:-1]) for k in listed):
                continue
        elif any(name.startswith(g) and g + "*" in listed for g in groups):
            continue
        problems.append("`%s` is not in the page" % name)
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sluiced", default=str(REPO / "build" / "sluiced"))
    ap.add_argument("--doc", default=str(REPO / "docs" / "configuration.md"))
    a = ap.parse_args(argv)
    keys, aliases, groups = read_table(a.sluiced)
    problems = check(keys, aliases, groups, read_doc(a.doc))
    for p in problems:
        print("%s: %s" % (a.doc, p))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
