"""scripts/soak.py (`make soak`) runs end to end: a few seconds against the tiny model."""
import subprocess
import sys

from tests.conftest import REPO


def test_soak_script_reports_served_errors_and_rss(tiny_bundle):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "soak.py"), "--model-dir", str(tiny_bundle),
                          "--seconds", "3", "--warmup-s", "1", "--concurrency", "4"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "errors 0" in out.stdout and "soak: OK" in out.stdout
    assert "server RSS start" in out.stdout and "server exit code 0" in out.stdout
