"""Benchmark of `traceattr report`: 8 ranks x 200 MB of JSON -> one HTML page (size and time).

    python benchmarks/bench_report.py [--ranks 8] [--mb 200] [--data /tmp/traceattr-bench-report]

Builds the traces once (cached in --data, as bench_hta.py), then times:
* `traceattr report` with the decoded tables already cached (what rendering the page costs: the levels,
  the binned timeline and the SVG charts), the second run of the command;
* the page alone in-process from the cached tables (page_data_files + trace_page, as `report` runs them);
* how long headless Chromium takes to show the page (navigation to load event and two frames), when
  playwright and Debian's chromium are installed.
Prints one markdown row per measurement for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hta import build_set  # noqa: E402  (the same builder spec and cache as the HTA benchmark)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--data", type=Path, default=Path("/tmp/traceattr-bench-report"))
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    folder, _, info = build_set(args.data, f"r{args.ranks}x{args.mb}", args.ranks, args.mb)
    page = args.data / "report.html"
    rows = []
    for label in ("cold (decode, write cache, page)", "cached tables (page only)"):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "traceattr.cli", "report", str(folder), "-o", str(page), "-q"],
                       check=True)
        rows.append((f"traceattr report {label}", time.perf_counter() - started, page.stat().st_size))
    from traceattr.analysis.page_plan import page_data_files
    from traceattr.io.discover import discover
    from traceattr.report.html import trace_page

    started = time.perf_counter()
    data, source = page_data_files(discover(str(folder)), progress=False)
    text, _ = trace_page(data, source, folder.name)
    rows.append(("page data + trace_page() in-process (cached tables)", time.perf_counter() - started, len(text)))
    rows += browser_rows(page)
    print(f"{args.ranks} ranks x {args.mb} MB JSON ({info['kernels']:,} kernels)")
    print("| measurement | seconds | page bytes |\n|---|---|---|")
    for label, seconds, size in rows:
        print(f"| {label} | {seconds:.2f} | {size:,} |")
    return 0


def browser_rows(page: Path) -> list[tuple[str, float, int]]:
    import shutil

    executable = shutil.which("chromium")
    if executable is None:
        return []
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        for attempt in range(3):
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            started = time.perf_counter()
            tab.goto(page.as_uri(), wait_until="load")
            tab.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            rows.append((f"Chromium shows the page (load + 2 frames), try {attempt + 1}",
                         time.perf_counter() - started, page.stat().st_size))
            tab.close()
        browser.close()
    return rows


if __name__ == "__main__":
    sys.exit(main())
