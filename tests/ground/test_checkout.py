"""A checkout, installed editable, imports from its own root too (README)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_an_editable_checkout_imports_consfig_from_its_own_root():
    r = subprocess.run([sys.executable, "-c",
                        "import consfig, consfig.connections, consfig.props; "
                        "print(consfig.connections.__path__[0])"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(ROOT, "connections"), r.stdout
