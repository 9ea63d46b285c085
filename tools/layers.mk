# tools/layers.mk - the layering check of issue 45, included by the top-level Makefile.
#   make layers           fail on any include against tools/layers.txt (up the floors, or from
#                         one door into another), circle of rooms, or file or room over its size
#                         that tools/layers-baseline.txt does not list; then the check's own tests
#                         (tests/layers/). Names the baseline lines that no longer occur.
#   make layers-baseline  rewrite the baseline from the tree after a fix; refuses while anything
#                         is new, so it only ever loses lines (accepting a new violation takes
#                         `tools/layers.py --write-baseline tools/layers-baseline.txt` by hand,
#                         in a commit of its own that says why)
# /usr/bin/python3 and its standard library only (pytest for the tests, as tests/integration).

.PHONY: layers layers-baseline

layers:
	@/usr/bin/python3 tools/layers.py --check tools/layers-baseline.txt
	@/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/layers

layers-baseline:
	@/usr/bin/python3 tools/layers.py --quiet --check tools/layers-baseline.txt
	@/usr/bin/python3 tools/layers.py --write-baseline tools/layers-baseline.txt
