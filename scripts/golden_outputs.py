"""Golden outputs of every `traceattr` CLI command, to prove a refactor bit-for-bit identical.

    python3 scripts/golden_outputs.py record OUT_DIR [--shared ../shared/traces] [--jobs 2]
    python3 scripts/golden_outputs.py compare DIR_A DIR_B        # exit 1 when any case differs

Recording the baseline of a commit without picking up edits in the working tree:

    git worktree add /tmp/golden-wt COMMIT
    cp traceattr/io/_scan.cpython-311-x86_64-linux-gnu.so /tmp/golden-wt/traceattr/io/
    PYTHONPATH=/tmp/golden-wt python3 /tmp/golden-wt/scripts/golden_outputs.py record /tmp/golden/base \\
        --shared /work/shared/traces
    python3 scripts/golden_outputs.py record /tmp/golden/new --shared /work/shared/traces   # the edited tree
    python3 scripts/golden_outputs.py compare /tmp/golden/base /tmp/golden/new

`record` runs the console script `traceattr` (there is no `traceattr/__main__.py`, so `python -m traceattr`
does not work) as `sys.executable <bin>/traceattr ...`, or `sys.executable -c "...entry.main()"` when the
script is missing, with the caller's environment (so PYTHONPATH picks the code under test; the package
actually imported is printed once and stored in `_meta.json`). Every command gets `--no-cache -j 1`, a
fixed terminal width (COLUMNS=200), TZ=UTC, C.UTF-8 and a cache folder in a temporary folder.

Each command runs with its working folder in a temporary "stage" folder holding symlinks `sample_traces`
(this repository's), `shared` (--shared; skipped with a note when absent; never copied) and the folder
`built` with the builder's multi-rank sets, so every path the CLI prints is relative and the same
wherever the repository is.

Inputs: `sample_traces` and every folder under it; every folder under --shared that directly holds trace
files (`tracelens/inference/sglang_decode/capture_traces` as a folder: traceattr skips its
execution_details.json with a note, and that is recorded; `tracelens/mi300`, four unrelated
single-process traces, is refused as a folder, and the refusal is its golden output); the single files in
SHARED_FILES given as the path; the three sets in BUILDS that traceattr.builder writes at record time from
fixed specs and seeds (their files' SHA-256 are a case of their own, `build.NAME`, so a builder change
shows up as such). Commands per input (`commands` below): summarize --by each level in csv and json to -o
FILE (a level the CLI rejects or cannot fill for an input records what it says); --per-rank csv; --by
module --tree csv; --links csv; check (table, --format json, --clip-outliers); convert -o STORE, then
summarize STORE --by kernel and --by rank (csv); report -o page.html. Plus compare A B --by kernel|op (csv,
json) for shared trace_diff/control vs test and builder ts4_a vs ts4_b, `--version`, and every command's
--help.

Recorded per case: argv, exit code, stdout, stderr and the output (text; a store as its manifest's text and
the SHA-256 of each parquet file), one JSON file per case named after the case id (OUT_DIR/ID.json;
`_meta.json` and `_timings.json` hold the package under test and seconds per case, and are not compared).

Normalised (in record, so both sides of a compare are), and nothing else:
  * the stage folder's absolute path -> <STAGE>, the repository root -> <REPO>, --shared -> <SHARED>
    (they differ between a worktree and the main checkout and between runs: temporary folders; the CLI
    prints paths as given, so they show only where it makes them absolute: a store's manifest);
  * report's footer `traceattr · generated YYYY-MM-DD HH:MM:SS UTC` -> `generated <TIME>`: the wall clock,
    the only difference between two runs' pages, so the raw page is not byte-stable but the page with
    this one field normalised is, and it is recorded (HTML_UNSTABLE lists inputs where it would not be);
  * in a store's `_traceattr_store.json`: `created_ns` (wall clock) and the sources' `mtime_ns` (file
    times: a fresh worktree and the rebuilt builder sets have new ones).

Dropped to keep a record near 6 minutes of two cores (915 cases; 10-20 minutes wall on busy ones): single-file variants of
traces already covered by their folder (see SHARED_FILES), and the second report run per input (html
stability is shown by recording twice and comparing instead).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = Path(os.environ.get("TRACEATTR_SHARED_TRACES", REPO / ".." / "shared" / "traces"))
SUMMARIZE_LEVELS = ("kernel", "category", "rank", "collective", "op", "op_stack", "module", "annotation", "step")
SUBCOMMANDS = ("summarize", "check", "convert", "report", "compare", "cache")
COMMON = ("--no-cache", "-j", "1")
TIMEOUT_S = 300
TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = {"execution_details.json"}          # JSON next to traces that is not one (tracelens capture)
# Inputs whose report page differs between two records even after the footer's time is normalised (their
# page is not recorded, only exit code and stderr); none at 32c178f (base vs base2: 0 differ).
HTML_UNSTABLE: frozenset[str] = frozenset()

# The builder's sets: (name, Python that writes it into the folder `out` (relative to the stage)).
BUILDS = (
    ("ts4_a", "from traceattr.builder import TraceSpec, write_trace_set\n"
              "write_trace_set(out, TraceSpec(ranks=4, steps=(1, 2, 3, 4), layers=3, coupled_collectives=True,"
              " with_stack=True, jitter=0.03, seed=101))"),
    ("ts4_b", "from traceattr.builder import TraceSpec, write_trace_set\n"
              "write_trace_set(out, TraceSpec(ranks=4, steps=(1, 2, 3, 4), layers=3, coupled_collectives=True,"
              " with_stack=True, jitter=0.03, seed=102, rank_scale={2: 1.2}, kernel_scale={'sgemm': 1.25},"
              " add_kernels={'void new_fused_kernel<float>(float const*, float*, long)': 40000},"
              " drop_kernels=('graph_fused_kernel_1',), gzip=True))"),
    ("mr4", "from traceattr.builder import MultiRankSpec, build_multirank\n"
            "build_multirank(MultiRankSpec(ranks=4, steps=4, clock_offset_ns={1: 250000, 3: -400000},"
            " extra_compute_ns={2: 70000}, p2p=True, subgroup_size=2, end_jitter_ns=2000, compute_jitter=0.05,"
            " seed=7), out)"),
)
# Single trace files under --shared given as the path (the other way in), where that shows something the
# folders do not: mi300's four files (its folder is refused), sglang_decode's own file (its folder also takes
# capture_traces/), one rank of a multi-rank set, a plain .json. Left out to keep a record near 5 minutes:
# the other rank of trace_filter, both of torch213_cpu/dist2 and single_gz, capture_traces/bs_32_rank0
# (its folder is that file plus the skipped execution_details.json), the files alone in their folder.
SHARED_FILES = (
    "tracelens/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "trace_filter/sampled_rank-0.json.gz",
    "torch213_cpu/single_json/single.1795988169779088759.pt.trace.json",
)
COMPARE_PAIRS = (("shared.trace_diff", "shared/trace_diff/control", "shared/trace_diff/test"),
                 ("built.ts4_a-vs-ts4_b", "built/ts4_a", "built/ts4_b"))


# ---------------------------------------------------------------------------------------------- cases

@dataclass
class Case:
    id: str
    argv: list[str]                    # traceattr's arguments
    output: str | None = None          # what -o writes, relative to the stage
    kind: str = "file"                 # file | store | html | build
    build: str | None = None           # kind build: the Python that writes `out`


@dataclass
class Job:
    """Cases run in order in one worker (convert before the summaries of its store)."""
    cases: list[Case] = field(default_factory=list)


def safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def commands(input_id: str, path: str) -> list[Job]:
    """Every command recorded for one input (a folder or a file, relative to the stage)."""
    out = f"out/{input_id}"
    jobs = []
    for level in SUMMARIZE_LEVELS:
        for fmt in ("csv", "json"):
            cid = f"{input_id}.summarize.by-{level}.{fmt}"
            jobs.append(Job([Case(cid, ["summarize", path, "--by", level, "--format", fmt, "-o",
                                        f"{out}/by-{level}.{fmt}"], f"{out}/by-{level}.{fmt}")]))
    jobs.append(Job([Case(f"{input_id}.summarize.per-rank.csv", ["summarize", path, "--per-rank", "--format", "csv"])]))
    jobs.append(Job([Case(f"{input_id}.summarize.by-module.tree.csv",
                          ["summarize", path, "--by", "module", "--tree", "--format", "csv"])]))
    jobs.append(Job([Case(f"{input_id}.summarize.links.csv", ["summarize", path, "--links", "--format", "csv"])]))
    jobs.append(Job([Case(f"{input_id}.check", ["check", path])]))
    jobs.append(Job([Case(f"{input_id}.check.json", ["check", path, "--format", "json"])]))
    jobs.append(Job([Case(f"{input_id}.check.clip-outliers", ["check", path, "--clip-outliers"])]))
    store = f"{out}/store"
    jobs.append(Job([Case(f"{input_id}.convert", ["convert", path, "-o", store], store, "store"),
                     Case(f"{input_id}.convert.summarize.by-kernel.csv",
                          ["summarize", store, "--by", "kernel", "--format", "csv"]),
                     Case(f"{input_id}.convert.summarize.by-rank.csv",
                          ["summarize", store, "--by", "rank", "--format", "csv"])]))
    jobs.append(Job([Case(f"{input_id}.report", ["report", path, "-o", f"{out}/page.html"], f"{out}/page.html",
                          "html")]))
    return jobs


def has_traces(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                  and p.name not in NOT_TRACES)


def inputs(stage: Path, shared_ok: bool) -> list[tuple[str, str]]:
    """(input id, path relative to the stage), in a fixed order."""
    found = [("sample", "sample_traces")]
    samples = stage / "sample_traces"
    for folder in sorted(p for p in samples.rglob("*") if p.is_dir()):
        rel = folder.relative_to(samples).as_posix()
        found.append(("sample." + safe(rel.replace("/", ".")), f"sample_traces/{rel}"))
    if shared_ok:
        root = stage / "shared"
        for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
            if has_traces(folder):
                rel = folder.relative_to(root).as_posix()
                found.append(("shared." + safe(rel.replace("/", ".")), f"shared/{rel}"))
        for rel in SHARED_FILES:
            if (root / rel).is_file():
                found.append(("shared." + safe(rel.replace("/", ".")), f"shared/{rel}"))
            else:
                print(f"note: {rel} is absent under the shared traces: skipped")
    for name, _ in BUILDS:
        found.append((f"built.{name}", f"built/{name}"))
    return found


def all_jobs(stage: Path, shared_ok: bool) -> list[Job]:
    jobs = [Job([Case(f"build.{name}", [], f"built/{name}", "build", code)]) for name, code in BUILDS]
    jobs.append(Job([Case("version", ["--version"])]))
    jobs.append(Job([Case("help", ["--help"])]))
    for sub in SUBCOMMANDS:
        jobs.append(Job([Case(f"help.{sub}", [sub, "--help"])]))
    for input_id, path in inputs(stage, shared_ok):
        jobs.extend(commands(input_id, path))
    for pair_id, a, b in COMPARE_PAIRS:
        if a.startswith("shared/") and not shared_ok:
            continue
        for level in ("kernel", "op"):
            for fmt in ("csv", "json"):
                cid = f"compare.{pair_id}.by-{level}.{fmt}"
                output = f"out/{cid}.{fmt}"
                jobs.append(Job([Case(cid, ["compare", a, b, "--by", level, "--format", fmt, "-o", output], output)]))
    ids = [case.id for job in jobs for case in job.cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return jobs


# ---------------------------------------------------------------------------------------------- normalising

class Normaliser:
    def __init__(self, stage: Path, shared: Path | None) -> None:
        pairs = [(str(stage.resolve()), "<STAGE>"), (str(stage), "<STAGE>"), (str(REPO), "<REPO>")]
        if shared is not None:
            pairs.append((str(shared.resolve()), "<SHARED>"))
        self.pairs = sorted(set(pairs), key=lambda p: -len(p[0]))     # longest first

    def text(self, text: str) -> str:
        for old, new in self.pairs:
            text = text.replace(old, new)
        return text

    def html(self, text: str) -> str:
        return re.sub(r"(traceattr · generated )\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+", r"\1<TIME>",
                      self.text(text))

    def store_manifest(self, text: str) -> str:
        # metadata_sha256 hashes the bytes above it, created_ns included: normalised with it
        text = re.sub(r'("(?:created_ns|mtime_ns)": )\d+', r"\1<NS>", self.text(text))
        return re.sub(r'("metadata_sha256": )"[0-9a-f]{64}"', r'\1"<SHA256>"', text)


def read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- record

def traceattr_command() -> list[str]:
    script = Path(sys.executable).parent / "traceattr"
    if script.is_file():
        return [sys.executable, str(script)]
    found = shutil.which("traceattr")
    if found and Path(found).read_bytes()[:2] == b"#!" and b"python" in Path(found).read_bytes().split(b"\n")[0]:
        return [sys.executable, found]
    return [sys.executable, "-c", "import sys; sys.argv[0] = 'traceattr'; from traceattr.entry import main; main()"]


class Recorder:
    def __init__(self, out_dir: Path, stage: Path, shared: Path | None, env: dict, norm: Normaliser) -> None:
        self.out_dir, self.stage, self.shared, self.env, self.norm = out_dir, stage, shared, env, norm
        self.command = traceattr_command()
        self.lock = threading.Lock()
        self.done = 0
        self.total = 0
        self.notes: list[str] = []
        self.timings: dict[str, float] = {}

    def run(self, argv: list[str]) -> tuple[object, str, str]:
        try:
            proc = subprocess.run(argv, cwd=self.stage, env=self.env, capture_output=True, timeout=TIMEOUT_S)
            code: object = proc.returncode
            stdout, stderr = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, stdout, stderr = f"timeout after {TIMEOUT_S} s", exc.stdout or b"", exc.stderr or b""
        return code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")

    def case(self, case: Case) -> None:
        notes: list[str] = []
        outputs: dict[str, str] = {}
        if case.kind == "build":
            code = f"out = {case.output!r}\n{case.build}\n"
            argv = [sys.executable, "-c", code]
            exit_code, stdout, stderr = self.run(argv)
            folder = self.stage / case.output
            if folder.is_dir():
                for path in sorted(folder.rglob("*")):
                    if path.is_file():
                        outputs[path.relative_to(folder).as_posix()] = \
                            "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
            shown = ["python", "-c", case.build]
        else:
            if case.output:
                (self.stage / case.output).parent.mkdir(parents=True, exist_ok=True)
            argv = [*self.command, *case.argv, *COMMON] if case.argv and case.argv[-1] != "--help" \
                and case.argv != ["--version"] else [*self.command, *case.argv]
            exit_code, stdout, stderr = self.run(argv)
            shown = ["traceattr", *argv[len(self.command):]]
            target = self.stage / case.output if case.output else None
            if case.kind == "file" and target is not None and target.is_file():
                outputs[Path(case.output).name] = self.norm.text(read_text(target))
            elif case.kind == "store" and target is not None and target.is_dir():
                for path in sorted(target.rglob("*")):
                    if path.is_file():
                        rel = path.relative_to(target).as_posix()
                        outputs[rel] = (self.norm.store_manifest(path.read_text()) if path.suffix == ".json"
                                        else "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest())
            elif case.kind == "html" and target is not None and target.is_file():
                if case.id.rsplit(".", 1)[0] in HTML_UNSTABLE:
                    notes.append("html not byte-stable across two runs: only the exit code and stderr are recorded")
                else:
                    outputs[target.name] = self.norm.html(read_text(target))
        record = {"id": case.id, "argv": shown, "exit_code": exit_code, "stdout": self.norm.text(stdout),
                  "stderr": self.norm.text(stderr), "outputs": outputs, "notes": notes}
        (self.out_dir / f"{case.id}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        with self.lock:
            self.done += 1
            if self.done % 50 == 0 or self.done == self.total:
                print(f"  {self.done}/{self.total} cases", flush=True)

    def job(self, job: Job) -> None:
        for case in job.cases:
            started = time.monotonic()
            self.case(case)
            with self.lock:
                self.timings[case.id] = round(time.monotonic() - started, 2)


def subprocess_env(stage: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEATTR_")}
    env.update(COLUMNS="200", LINES="60", TZ="UTC", LC_ALL="C.UTF-8", LANG="C.UTF-8", PYTHONHASHSEED="0",
               PYTHONIOENCODING="utf-8", TRACEATTR_CACHE_DIR=str(stage / "cache"))
    for name in ("FORCE_COLOR", "CLICOLOR_FORCE", "TERM_PROGRAM"):
        env.pop(name, None)
    return env


def record(out_dir: Path, shared: Path, jobs: int) -> int:
    started = time.monotonic()
    if out_dir.exists() and any(out_dir.iterdir()):
        print(f"golden_outputs: {out_dir} is not empty; give a new folder", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="golden-stage-"))
    try:
        (stage / "sample_traces").symlink_to(REPO / "sample_traces")
        shared_ok = shared.is_dir()
        if shared_ok:
            (stage / "shared").symlink_to(shared.resolve())
        else:
            print(f"note: {shared} is absent: its traces are skipped")
        (stage / "built").mkdir()
        env = subprocess_env(stage)
        norm = Normaliser(stage, shared if shared_ok else None)
        probe = subprocess.run([sys.executable, "-c", "import traceattr; print(traceattr.__file__)"], cwd=stage,
                               env=env, capture_output=True, text=True)
        package = probe.stdout.strip() or probe.stderr.strip()
        print(f"traceattr under test: {package}")
        recorder = Recorder(out_dir, stage, shared if shared_ok else None, env, norm)
        print(f"command: {' '.join(recorder.command)}")
        plan = all_jobs(stage, shared_ok)
        builds = [job for job in plan if job.cases[0].kind == "build"]
        rest = [job for job in plan if job not in builds]
        recorder.total = sum(len(job.cases) for job in plan)
        print(f"{recorder.total} cases, {len(rest) + len(builds)} jobs, {jobs} at once")
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(recorder.job, builds))        # the inputs of later cases
            list(pool.map(recorder.job, rest))
        elapsed = time.monotonic() - started
        meta = {"traceattr_file": norm.text(package), "traceattr_file_raw": package, "command": recorder.command,
                "python": sys.version, "shared": str(shared) if shared_ok else None, "cases": recorder.total,
                "seconds": round(elapsed, 1), "notes": recorder.notes}
        (out_dir / "_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        slowest = dict(sorted(recorder.timings.items(), key=lambda item: -item[1]))
        (out_dir / "_timings.json").write_text(json.dumps(slowest, indent=0) + "\n")     # seconds per case
        for note in recorder.notes:
            print("note:", note)
        print(f"recorded {recorder.total} cases into {out_dir} in {elapsed:.0f} s")
        return 0
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- compare

def load(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if not p.name.startswith("_")}


def short_diff(a: str, b: str, name: str, lines: int = 12) -> list[str]:
    diff = list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"A/{name}", f"B/{name}", n=1, lineterm=""))
    clipped = [line if len(line) <= 300 else line[:300] + " ..." for line in diff[:lines]]
    return clipped + ([f"    ... ({len(diff) - lines} more diff lines)"] if len(diff) > lines else [])


def _unhashed(outputs: dict) -> dict:
    """Records made before store_manifest() normalised metadata_sha256 (a hash of created_ns) compare too."""
    return {name: re.sub(r'("metadata_sha256": )"[0-9a-f]{64}"', r'\1"<SHA256>"', text) if isinstance(text, str)
            else text for name, text in outputs.items()}


def compare(dir_a: Path, dir_b: Path) -> int:
    a, b = load(dir_a), load(dir_b)
    if not a and not b:
        print(f"golden_outputs: no cases in {dir_a} or {dir_b}", file=sys.stderr)
        return 2
    differ = 0
    for cid in sorted(set(a) | set(b)):
        if cid not in a or cid not in b:
            differ += 1
            print(f"DIFF {cid}: only in {'A' if cid in a else 'B'}")
            continue
        x, y = a[cid], b[cid]
        problems: list[str] = []
        if x.get("argv") != y.get("argv"):
            problems.append(f"  argv: {x.get('argv')} != {y.get('argv')}")
        if x.get("exit_code") != y.get("exit_code"):
            problems.append(f"  exit code: {x.get('exit_code')} != {y.get('exit_code')}")
        for stream in ("stdout", "stderr"):
            if x.get(stream) != y.get(stream):
                problems.append(f"  {stream} differs:")
                problems.extend("    " + line for line in short_diff(x.get(stream, ""), y.get(stream, ""), stream))
        xo, yo = _unhashed(x.get("outputs", {})), _unhashed(y.get("outputs", {}))
        for name in sorted(set(xo) | set(yo)):
            if name not in xo or name not in yo:
                problems.append(f"  output {name}: only in {'A' if name in xo else 'B'}")
            elif xo[name] != yo[name]:
                problems.append(f"  output {name} differs:")
                problems.extend("    " + line for line in short_diff(xo[name], yo[name], name))
        if x.get("notes") != y.get("notes"):
            problems.append(f"  notes: {x.get('notes')} != {y.get('notes')}")
        if problems:
            differ += 1
            print(f"DIFF {cid}")
            print("\n".join(problems))
    total = len(set(a) | set(b))
    print(f"{total} cases, {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record", help="run every case and write its outputs into OUT_DIR (new or empty)")
    rec.add_argument("out_dir", type=Path)
    rec.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                     help="the shared reference traces (default: $TRACEATTR_SHARED_TRACES, else ../shared/traces "
                          "next to the repository); skipped with a note when absent")
    rec.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    cmp_ = sub.add_parser("compare", help="list the cases whose outputs differ; exit 1 when any does")
    cmp_.add_argument("dir_a", type=Path)
    cmp_.add_argument("dir_b", type=Path)
    args = parser.parse_args(argv)
    if args.mode == "record":
        return record(args.out_dir, args.shared, max(1, args.jobs))
    return compare(args.dir_a, args.dir_b)


if __name__ == "__main__":
    sys.exit(main())
