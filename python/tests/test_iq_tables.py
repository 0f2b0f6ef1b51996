"""The committed IQ lookup tables (c/format/quant/iq_tables.c, c/cuda/iq_grids.cuh) must equal what
tools/gen_iq_tables.py generates from the gguf package's arrays."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_iq_tables_up_to_date():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_iq_tables.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
