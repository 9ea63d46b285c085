"""tests/layers/test_layers.py - the layering check (tools/layers.py) on small made-up trees.

Each test builds a src/ tree and a layers file in its own temp dir and runs the script as
`make layers` does, so every rule is seen to fire (and to stay quiet on a clean tree) without
depending on the state of the real src/. Run by `make layers`, or alone:
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/layers
"""

import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'tools',
                      'layers.py')

LAYERS = """\
# a made-up house: two floors of rooms under two doors
1 core          # the ground
2 lib           # a room
2 side          # a room beside lib, on its floor
3 web  door     # one door
3 wire door     # another door
4 main          # the top
max-file-lines 50
max-room-lines web 80
"""

CLEAN = {
    'core/buf.h': '#pragma once\n',
    'core/buf.c': '#include "buf.h"\n',
    'lib/lib.h': '#include "../core/buf.h"\n',
    'lib/lib.c': '#include "lib.h"\n#include "core/buf.h"\n#include <stdio.h>\n',
    'side/side.h': '#include "core/buf.h"\n',
    'side/side.c': '#include "side.h"\n#include "../lib/lib.h"\n',
    'web/web.h': '#include "../lib/lib.h"\n',
    'web/web.c': '#include "web.h"\n',
    'wire/wire.h': '#pragma once\n',
    'wire/wire.c': '#include "wire.h"\n#include "core/buf.h"\n',
    'main.c': '#include "web/web.h"\n#include "wire/wire.h"\n',
}


def make_tree(tmp_path, files=None, layers=LAYERS):
    for rel, text in (CLEAN if files is None else files).items():
        path = tmp_path / 'src' / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / 'tools').mkdir(exist_ok=True)
    (tmp_path / 'tools' / 'layers.txt').write_text(layers)
    return tmp_path


def edit(root, rel, text):
    path = root / 'src' / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run(root, *args):
    p = subprocess.run([sys.executable, SCRIPT, '--root', str(root)] + list(args),
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def baseline(root):
    return str(root / 'tools' / 'layers-baseline.txt')


def violations(root):
    rc, out, err = run(root, '--write-baseline', baseline(root))
    assert rc == 0, err
    with open(baseline(root)) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith('#')]


def test_clean_tree_has_no_violation_in_any_spelling(tmp_path):
    root = make_tree(tmp_path)
    assert violations(root) == []
    rc, out, err = run(root, '--check', baseline(root))
    assert rc == 0, err
    assert 'ok' in out


def test_include_back_up_the_floors(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'side/side.c', '#include "side.h"\n#include "../wire/wire.h"\n')
    assert violations(root) == ['src/side/side.c -> src/wire/wire.h  upward']
    rc, out, _ = run(root)
    assert 'src/side/side.c:2: #include "../wire/wire.h"' in out
    assert 'room side (floor 2) includes door wire (floor 3)' in out
    assert '[upward]' in out
    # the -Isrc spelling resolves to the same file
    edit(root, 'side/side.c', '#include "side.h"\n#include "wire/wire.h"\n')
    assert violations(root) == ['src/side/side.c -> src/wire/wire.h  upward']
    # and one that runs up to close a loop is a circle as well
    edit(root, 'core/buf.c', '#include "buf.h"\n#include "../lib/lib.h"\n')
    assert violations(root) == ['src/core/buf.c -> src/lib/lib.h  upward',
                                'src/side/side.c -> src/wire/wire.h  upward',
                                'src/core/ <-> src/lib/  circle']


def test_door_into_door(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'web/web.c', '#include "web.h"\n#include "wire/wire.h"\n')
    # sideways on the floor, so not upward: the door rule alone
    assert violations(root) == ['src/web/web.c -> src/wire/wire.h  door-to-door']
    rc, out, _ = run(root)
    assert 'src/web/web.c:2: #include "wire/wire.h"' in out
    assert 'a door may not include another door [door-to-door]' in out


def test_circle_across_rooms_on_one_floor(tmp_path):
    root = make_tree(tmp_path)
    # lib and side share a floor, so neither include runs up: only the circle says anything
    edit(root, 'lib/lib.c', '#include "lib.h"\n#include "../side/side.h"\n')
    assert violations(root) == ['src/lib/ <-> src/side/  circle']
    rc, out, _ = run(root)
    assert 'circle of 2 rooms: lib side' in out
    assert 'lib -> side: src/lib/lib.c:2 includes src/side/side.h' in out
    assert 'side -> lib: src/side/side.c:2 includes src/lib/lib.h' in out


def test_sizes(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'web/big.c', '/* x */\n' * 81)
    assert violations(root) == ['src/web/big.c  file-over-50-lines',
                                'src/web/  room-over-80-lines']
    edit(root, 'web/big.c', '/* x */\n' * 50)
    assert violations(root) == []


def test_new_violation_not_in_baseline_fails(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'side/side.c', '#include "side.h"\n#include "../wire/wire.h"\n')
    violations(root)  # accepted in the baseline
    rc, _, err = run(root, '--check', baseline(root))
    assert rc == 0, err
    edit(root, 'lib/lib.h', '#include "../core/buf.h"\n#include "../wire/wire.h"\n')
    rc, out, err = run(root, '--check', baseline(root))
    assert rc == 1
    assert '1 new layering violation' in err
    assert 'src/lib/lib.h:2: #include "../wire/wire.h"' in err
    assert '[upward]' in err
    assert 'src/side/side.c' not in err  # the accepted one is not news


def test_removed_violation_is_reported_for_deletion(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'side/side.c', '#include "side.h"\n#include "../wire/wire.h"\n')
    violations(root)
    edit(root, 'side/side.c', '#include "side.h"\n')
    rc, out, err = run(root, '--check', baseline(root))
    assert rc == 0, err
    assert 'no longer occur' in out and 'delete them' in out
    assert '  src/side/side.c -> src/wire/wire.h  upward' in out
    rc, _, _ = run(root, '--check', baseline(root), '--strict')
    assert rc == 1


def test_smaller_circle_is_covered_and_a_wider_one_is_new(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'lib/lib.c', '#include "lib.h"\n#include "../side/side.h"\n')
    edit(root, 'core/buf.c', '#include "buf.h"\n#include "../side/side.h"\n')
    edit(root, 'core/buf.h', '#include "../lib/lib.h"\n')
    assert 'src/core/ <-> src/lib/ <-> src/side/  circle' in violations(root)
    # break core out of it: lib <-> side remains, a part of the accepted circle
    edit(root, 'core/buf.c', '#include "buf.h"\n')
    edit(root, 'core/buf.h', '#pragma once\n')
    rc, out, err = run(root, '--check', baseline(root))
    assert rc == 0, err
    assert 'now smaller, put in its place: src/lib/ <-> src/side/  circle' in out
    # a circle with a room the baseline's has not is new
    edit(root, 'core/buf.c', '#include "buf.h"\n#include "../side/side.h"\n')
    edit(root, 'core/buf.h', '#include "../lib/lib.h"\n')
    edit(root, 'side/side.h', '#include "core/buf.h"\n#include "../web/web.h"\n')
    edit(root, 'web/web.h', '#include "../lib/lib.h"\n#include "../side/side.h"\n')
    rc, _, err = run(root, '--check', baseline(root))
    assert rc == 1
    assert 'circle of 4 rooms: core lib side web' in err


def test_unlisted_room_and_unplaceable_include_stop_the_check(tmp_path):
    root = make_tree(tmp_path)
    edit(root, 'newroom/x.c', '#include "core/buf.h"\n')
    rc, _, err = run(root)
    assert rc == 2 and 'room newroom is not in' in err
    root = make_tree(tmp_path / 'b')
    edit(root, 'lib/lib.c', '#include "lib.h"\n#include "gen/made_later.h"\n')
    rc, _, err = run(root)
    assert rc == 2 and 'src/lib/lib.c:2: #include "gen/made_later.h"' in err


def test_malformed_layers_file(tmp_path):
    root = make_tree(tmp_path, layers=LAYERS + '5 web\n')
    rc, _, err = run(root)
    assert rc == 2 and 'listed twice' in err
    root = make_tree(tmp_path / 'b', layers=LAYERS + '5 top gate\n')
    rc, _, err = run(root)
    assert rc == 2 and 'expected "door"' in err
