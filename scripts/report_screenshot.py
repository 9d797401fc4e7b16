"""Regenerate the README's screenshot of the HTML report (docs/images/report.png).

    python3 scripts/report_screenshot.py [--trace sample_traces/synthetic_2rank] [--out docs/images/report.png]

Runs `traceattr report` on the bundled sample and photographs the page's first 1300 px in headless
Chromium (playwright + Debian's `chromium`, as the browser tests use), 1150 px wide: what a reader sees
first when the page opens.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path, default=ROOT / "sample_traces" / "synthetic_2rank")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report.png")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        page_path = Path(folder) / "report.html"
        subprocess.run([sys.executable, "-m", "traceattr", "report", str(args.trace), "-o", str(page_path),
                        "--no-cache"], check=True, stderr=subprocess.DEVNULL)   # not -q: it drops the findings
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 1150, "height": 1300})
            tab.goto(page_path.as_uri(), wait_until="load")
            tab.screenshot(path=str(args.out), full_page=False)
            browser.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
