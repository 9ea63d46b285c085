"""docs/configuration.md against the settings table (issue 45): every key and alias sluiced
takes (`sluiced --print-settings`, node/settings.c) is on the page, the page lists no key
sluiced lacks, and each default the page gives is the table's (tools/settings_doc.py). Also
that the check itself notices a key missing, one too many and a wrong default."""
import sys
from pathlib import Path

from conftest import REPO, sluiced_binary

sys.path.insert(0, str(REPO / "tools"))
import settings_doc  # noqa: E402

DOC = REPO / "docs" / "configuration.md"


def problems(text, tmp_path):
    page = tmp_path / "configuration.md"
    page.write_text(text)
    keys, aliases, groups = settings_doc.read_table(sluiced_binary())
    return settings_doc.check(keys, aliases, groups, settings_doc.read_doc(page))


def test_the_page_matches_the_table(tmp_path):
    assert problems(DOC.read_text(), tmp_path) == []


def test_the_check_sees_a_missing_key_an_extra_key_and_a_wrong_default(tmp_path):
    text = DOC.read_text()
    row = "| `heartbeat` | 60 |"
    assert row in text
    assert problems(text.replace(row, "| `heartbeat` | 30 |"), tmp_path) == [
        "line %d: `heartbeat` default '30', the table says '60'"
        % (text[:text.index(row)].count("\n") + 1)]
    gone = problems("\n".join(line for line in text.splitlines()
                              if not line.startswith("| `msmq.seq_window`")), tmp_path)
    assert gone == ["`msmq.seq_window` is not in the page"]
    extra = problems(text.replace(row, "| `heartbeat`, `heartbeat_ms` | 60 |"), tmp_path)
    assert len(extra) == 1 and "`heartbeat_ms` is not a key sluiced knows" in extra[0]
    aliases = problems(text.replace("| `tls_port` |", "| tls_port |"), tmp_path)
    assert aliases == ["`tls_port` is not in the page"]
