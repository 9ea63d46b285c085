#!/usr/bin/python3
"""tools/layers.py - the layering check of issue 45, a ratchet until the redesign lands.

Reads tools/layers.txt (the rooms of src/ in floors, bottom first, and which are doors), then
every `#include "..."` of src/**/*.[ch], resolved the way the compiler does with -Isrc: first
beside the including file ("x.h", "../core/x.h"), then under src/ ("core/x.h"). It reports:
  upward           an include from a room into a room on a higher floor
  door-to-door     an include from one door into another
  circle           rooms that include each other, however indirectly (a strongly connected
                   component of the room graph with two rooms or more)
  file-over-N-lines  a source file longer than max-file-lines
  room-over-N-lines  a room longer than its max-room-lines
Angle-bracket includes are the system's and are not read.

Usage:
  layers.py                     print every violation and the figures; exit 0
  layers.py --check BASELINE    exit 1 when a violation is not in BASELINE; list the lines of
                                BASELINE that no longer occur (delete them: it only shrinks)
  layers.py --check BASELINE --strict   also fail while BASELINE lists what no longer occurs
  layers.py --write-baseline BASELINE   write today's violations to BASELINE
  --root DIR (default: the parent of tools/), --layers FILE (default: ROOT/tools/layers.txt)
An include from one door into another is reported as door-to-door only, whatever the floors.
Exit 2: the layers file is malformed, a room of src/ is not listed in it, or an include names
a file that is in neither place the compiler looks (the check could not place it).

Invariants: the baseline holds one violation a line, `SUBJECT  RULE`, sorted by rule then
subject, so that it diffs and merges line by line.
A circle's subject is its rooms in name order; a baseline circle also covers any circle made of
a subset of its rooms (breaking a circle in two is progress, not a new violation). Python 3
standard library only; the whole tree is read in well under a second.
"""

import argparse
import os
import re
import sys

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = ('.c', '.h')
# Rule order in reports and in the baseline file.
RULES = ('upward', 'door-to-door', 'circle', 'file-size', 'room-size')


class LayersError(Exception):
    """A problem with the input that the check cannot judge past (exit 2)."""


class Layers:
    """tools/layers.txt: floor and door flag of every room, and the size limits."""

    def __init__(self, path):
        self.path = path
        self.floor = {}  # room -> floor number
        self.doors = set()
        self.comment = {}  # room -> its comment, for messages
        self.max_file_lines = None
        self.max_room_lines = {}  # room -> limit
        with open(path, encoding='utf-8') as f:
            for n, raw in enumerate(f, 1):
                line, _, comment = raw.partition('#')
                words = line.split()
                if not words:
                    continue
                where = '%s:%d' % (path, n)
                if words[0] == 'max-file-lines' and len(words) == 2 and words[1].isdigit():
                    self.max_file_lines = int(words[1])
                elif words[0] == 'max-room-lines' and len(words) == 3 and words[2].isdigit():
                    self.max_room_lines[words[1]] = int(words[2])
                elif words[0].isdigit() and len(words) in (2, 3):
                    room = words[1]
                    if room in self.floor:
                        raise LayersError('%s: room %s listed twice' % (where, room))
                    if len(words) == 3:
                        if words[2] != 'door':
                            raise LayersError('%s: expected "door" after the room, got %r'
                                              % (where, words[2]))
                        self.doors.add(room)
                    self.floor[room] = int(words[0])
                    self.comment[room] = comment.strip()
                else:
                    raise LayersError('%s: expected "FLOOR ROOM [door]", "max-file-lines N" '
                                      'or "max-room-lines ROOM N", got %r' % (where, line.strip()))
        for room in self.max_room_lines:
            if room not in self.floor:
                raise LayersError('%s: max-room-lines names %s, which is not a room'
                                  % (path, room))
        if not self.floor:
            raise LayersError('%s: no rooms listed' % path)

    def describe(self, room):
        return '%s %s (floor %d)' % ('door' if room in self.doors else 'room', room,
                                     self.floor[room])


def room_of(rel):
    """The room of a path relative to src/: its first directory, or a top file's stem."""
    parts = rel.split('/')
    return parts[0] if len(parts) > 1 else os.path.splitext(parts[0])[0]


def scan(root):
    """Every source file under root/src: {rel: (line count, [(line, text, target rel)])}.

    Raises LayersError for an include that resolves to no file of the tree."""
    src = os.path.join(root, 'src')
    if not os.path.isdir(src):
        raise LayersError('%s: no src/ directory' % root)
    files = {}
    unresolved = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(SOURCE_EXT):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src).replace(os.sep, '/')
            includes = []
            count = 0
            with open(path, encoding='utf-8', errors='replace') as f:
                for n, line in enumerate(f, 1):
                    count = n
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    spelled = m.group(1)
                    target = None
                    for base in (dirpath, src):
                        cand = os.path.normpath(os.path.join(base, spelled))
                        if os.path.isfile(cand):
                            target = os.path.relpath(cand, src).replace(os.sep, '/')
                            break
                    if target is None or target.startswith('../'):
                        unresolved.append('src/%s:%d: #include "%s"' % (rel, n, spelled))
                        continue
                    includes.append((n, spelled, target))
            files[rel] = (count, includes)
    if unresolved:
        raise LayersError('includes that name no file under src/ (the check cannot place '
                          'them):\n  ' + '\n  '.join(unresolved))
    return files


def sccs(nodes, edges):
    """Strongly connected components (Tarjan, iterative) of {node: set(successors)}."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


class Violation:
    def __init__(self, rule, subject, message, rooms=None):
        self.rule = rule
        self.subject = subject
        self.message = message  # lines, the first naming file:line where there is one
        self.rooms = rooms  # for a circle: frozenset of its rooms

    @property
    def key(self):
        return '%s  %s' % (self.subject, self.rule)


def analyse(root, layers):
    """Return (violations sorted by rule then subject, figures dict)."""
    files = scan(root)
    for rel in files:
        room = room_of(rel)
        if room not in layers.floor:
            raise LayersError('src/%s: room %s is not in %s: give it a floor there'
                              % (rel, room, layers.path))

    violations = []
    edges = {}  # room -> {room: [(rel, line, target)]}
    up_lines = door_lines = 0
    for rel, (_, includes) in sorted(files.items()):
        a = room_of(rel)
        by_target = {}
        for n, spelled, target in includes:
            b = room_of(target)
            if a == b:
                continue
            edges.setdefault(a, {}).setdefault(b, []).append((rel, n, target))
            if a in layers.doors and b in layers.doors:
                rule, why = 'door-to-door', 'a door may not include another door'
                door_lines += 1
            elif layers.floor[b] > layers.floor[a]:
                rule, why = 'upward', 'an include may not run up the floors'
                up_lines += 1
            else:
                continue
            by_target.setdefault((target, rule), []).append(
                'src/%s:%d: #include "%s": %s includes %s: %s [%s]'
                % (rel, n, spelled, layers.describe(a), layers.describe(b), why, rule))
        for (target, rule), msgs in sorted(by_target.items()):
            violations.append(Violation(rule, 'src/%s -> src/%s' % (rel, target), msgs))

    room_edges = {a: set(bs) for a, bs in edges.items()}
    circles = [c for c in sccs(set(layers.floor), room_edges) if len(c) > 1]
    for comp in circles:
        msgs = ['circle of %d rooms: %s: rooms that include each other, however indirectly; '
                'it opens where a marked include goes [circle]' % (len(comp), ' '.join(comp))]
        for a in comp:
            for b in comp:
                ties = edges.get(a, {}).get(b) if a != b else None
                if ties:
                    rel, n, target = ties[0]
                    more = ' (and %d more)' % (len(ties) - 1) if len(ties) > 1 else ''
                    if a in layers.doors and b in layers.doors:
                        more += ' [door-to-door]'
                    elif layers.floor[b] > layers.floor[a]:
                        more += ' [upward]'
                    msgs.append('  %s -> %s: src/%s:%d includes src/%s%s'
                                % (a, b, rel, n, target, more))
        violations.append(Violation('circle', ' <-> '.join('src/%s/' % r for r in comp), msgs,
                                    rooms=frozenset(comp)))

    big = []
    if layers.max_file_lines is not None:
        for rel, (count, _) in sorted(files.items()):
            if count > layers.max_file_lines:
                big.append((rel, count))
                violations.append(Violation(
                    'file-over-%d-lines' % layers.max_file_lines, 'src/%s' % rel,
                    ['src/%s:%d: %d lines, over the limit of %d [file-over-%d-lines]'
                     % (rel, count, count, layers.max_file_lines, layers.max_file_lines)]))
    room_lines = {}
    for rel, (count, _) in files.items():
        room_lines[room_of(rel)] = room_lines.get(room_of(rel), 0) + count
    for room, limit in sorted(layers.max_room_lines.items()):
        have = room_lines.get(room, 0)
        if have > limit:
            violations.append(Violation(
                'room-over-%d-lines' % limit, 'src/%s/' % room,
                ['src/%s/: %d lines, over the limit of %d [room-over-%d-lines]'
                 % (room, have, limit, limit)]))

    def order(v):
        kind = v.rule if v.rule in RULES[:3] else ('file-size' if v.rule.startswith('file')
                                                   else 'room-size')
        return (RULES.index(kind), v.subject)
    violations.sort(key=order)

    figures = {
        'upward': up_lines,
        'door_to_door': door_lines,
        'circles': circles,
        'big_files': big,
        'room_lines': room_lines,
        'file_circles': file_circles(files),
    }
    return violations, figures


def file_circles(files):
    """Circles of files (a .c with its .h as one) whose files lie in two rooms or more."""
    unit = lambda rel: os.path.splitext(rel)[0]
    edges = {}
    for rel, (_, includes) in files.items():
        for _, _, target in includes:
            if unit(target) != unit(rel):
                edges.setdefault(unit(rel), set()).add(unit(target))
    nodes = {unit(rel) for rel in files}
    out = []
    for comp in sccs(nodes, edges):
        rooms = sorted({room_of(u) for u in comp})
        if len(rooms) > 1:
            out.append((len(comp), rooms))
    return sorted(out, reverse=True)


def figures_text(figures, layers):
    f = figures
    lines = ['includes against the order: %d lines run up the floors, %d go from one door '
             'into another' % (f['upward'], f['door_to_door'])]
    circles = f['circles']
    lines.append('circles spanning rooms: %d%s' % (
        len(circles), ''.join(' [%s]' % ' '.join(c) for c in circles)))
    fc = f['file_circles']
    if fc:
        lines.append('  of files (a .c with its .h as one): %s' % ', '.join(
            '%d files across %s' % (n, '/'.join(r)) for n, r in fc))
    limit = layers.max_file_lines
    if limit is not None:
        lines.append('files over %d lines: %d%s' % (limit, len(f['big_files']), ''.join(
            ' [src/%s %d]' % b for b in f['big_files'])))
    for room, lim in sorted(layers.max_room_lines.items()):
        lines.append('%s/ lines: %d (limit %d)' % (room, f['room_lines'].get(room, 0), lim))
    return lines


def read_baseline(path):
    """Baseline keys (normalised `SUBJECT  RULE`) in file order."""
    keys = []
    with open(path, encoding='utf-8') as f:
        for raw in f:
            line = raw.split('#', 1)[0].strip()
            if line:
                subject, _, rule = line.rpartition(' ')
                keys.append('%s  %s' % (' '.join(subject.split()), rule))
    return keys


def circle_rooms(key):
    subject = key.rsplit('  ', 1)[0]
    return frozenset(p.strip().strip('/').split('/')[-1] for p in subject.split('<->'))


def write_baseline(path, violations):
    with open(path, 'w', encoding='utf-8') as f:
        f.write('# tools/layers-baseline.txt - layering violations accepted until issue 45\'s '
                'redesign removes them.\n'
                '# Written by `make layers-baseline` (tools/layers.py --write-baseline); '
                'one a line, SUBJECT  RULE.\n'
                '# It may only shrink: `make layers` fails on a violation not listed here '
                'and names the lines\n'
                '# that no longer occur, to be deleted. A circle here also covers a circle '
                'of fewer of its rooms.\n')
        for v in violations:
            f.write(v.key + '\n')


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--root', default=os.path.dirname(here),
                    help='project root holding src/ (default: the parent of tools/)')
    ap.add_argument('--layers', help='the rooms in order (default: ROOT/tools/layers.txt)')
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument('--check', metavar='BASELINE',
                      help='fail on any violation not listed in BASELINE')
    mode.add_argument('--write-baseline', metavar='BASELINE',
                      help="write today's violations to BASELINE")
    ap.add_argument('--strict', action='store_true',
                    help='with --check, also fail while BASELINE lists what no longer occurs')
    ap.add_argument('-q', '--quiet', action='store_true', help='no figures when all is well')
    args = ap.parse_args(argv)
    layers_path = args.layers or os.path.join(args.root, 'tools', 'layers.txt')
    out = sys.stdout
    try:
        layers = Layers(layers_path)
        violations, figures = analyse(args.root, layers)
    except (LayersError, OSError) as e:
        print('layers: %s' % e, file=sys.stderr)
        return 2

    if args.write_baseline:
        write_baseline(args.write_baseline, violations)
        print('layers: wrote %d violations to %s' % (len(violations), args.write_baseline),
              file=out)
        return 0

    if not args.check:
        for v in violations:
            print('\n'.join(v.message), file=out)
        for line in figures_text(figures, layers):
            print('layers: ' + line, file=out)
        return 0

    try:
        baseline = read_baseline(args.check)
    except OSError as e:
        print('layers: %s' % e, file=sys.stderr)
        return 2
    base = set(baseline)
    base_circles = [circle_rooms(k) for k in baseline if k.endswith('  circle')]
    new = []
    for v in violations:
        if v.key in base:
            continue
        if v.rule == 'circle' and any(v.rooms <= c for c in base_circles):
            continue  # part of a circle the baseline accepts: smaller is progress
        new.append(v)
    present = {v.key for v in violations}
    # A baseline circle inside a wider circle of today has not gone: it grew (reported above).
    wider = [v.rooms for v in violations if v.rule == 'circle']
    gone = [k for k in baseline if k not in present and not (
        k.endswith('  circle') and any(circle_rooms(k) < w for w in wider))]
    status = 0
    if new:
        status = 1
        print('layers: %d new layering violation(s), not in %s (see tools/layers.txt for the '
              'floors; issue 45):' % (len(new), args.check), file=sys.stderr)
        for v in new:
            print('\n'.join(v.message), file=sys.stderr)
    if gone:
        if args.strict:
            status = 1
        print('layers: %d line(s) of %s no longer occur, the layering got better: delete them '
              '(or run `make layers-baseline`, which rewrites it from the tree), so that they '
              'cannot come back:' % (len(gone), args.check), file=out)
        for k in gone:
            now = [v.key for v in violations if v.rule == 'circle' and k.endswith('  circle')
                   and v.key not in base and v.rooms <= circle_rooms(k)]
            print('  ' + k + ''.join('\n    now smaller, put in its place: ' + n for n in now),
                  file=out)
    if status == 0:
        if not args.quiet:
            for line in figures_text(figures, layers):
                print('layers: ' + line, file=out)
        print('layers: ok, nothing beyond the %d accepted line(s) of %s'
              % (len(baseline), args.check), file=out)
    return status


if __name__ == '__main__':
    sys.exit(main())
