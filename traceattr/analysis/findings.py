"""Findings: the few sentences a report opens with, each a number from an analysis's result and the command
that shows more, ranked by the time they concern.

A rule is a function of `Results` (what the analyses of one report computed) returning Findings; it never
reads notes or rendered text. Rules register with `@rule`; adding a finding for a new analysis is its result
in `Results.extra` (or a field here) and one rule:

    @rule
    def carried_in(found: Results):
        count, ns, excluded = found.extra.get(CARRIED_IN, (0, 0, False))
        return [Finding(f"{human_ns(ns)} carried in", ns, "traceattr check")] if count and not excluded else []

`findings_of` runs every rule, drops what concerns too little time, and keeps the MAX_FINDINGS largest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from traceattr.analysis.findings_part import FindingsData, GAP_MIN_NS, PAGEABLE_ASYNC
from traceattr.analysis.launch import SHORT_NS
from traceattr.analysis.noise import MIN_VERDICT_STEPS
from traceattr.units import counted, human_ns, p_text

FINDINGS = "findings"      # the header's key: the sentences, largest first
MAX_FINDINGS = 5
MIN_SHARE = 0.01           # a finding about less than 1% of busy time (or of the windows, for gaps) is dropped
LOW_LINKED_SHARE = 0.9     # below this share of device time linked to a key, the level's table is partial
# short activities dominate when they hold this share of busy time, or are this share of all activities
SHORT_BUSY_SHARE = 0.3
SHORT_COUNT_SHARE = 0.5


@dataclass(frozen=True)
class Finding:
    text: str          # one sentence with its number
    ns: int            # the time it concerns: the ranking
    command: str       # what shows more, e.g. "--by rank"

    def line(self) -> str:
        return f"{self.text} — more: {self.command}"


@dataclass
class Results:
    """What one report's analyses computed (any field may be absent: None or empty)."""
    busy_ns: int = 0
    window_ns: int = 0
    ranks: int = 1
    communication_ns: int = 0         # time communication ran (communication_running_ns): hidden or not
    exposed_communication_ns: int = 0
    straggler: object = None          # analysis.straggler.Straggler (the rank and collective tables)
    linked_share: float | None = None  # of the device time, linked to a key of `level` (attribution tables)
    level: str = ""
    data: FindingsData | None = None  # findings_part's sums
    extra: dict = field(default_factory=dict)   # other analyses' results, for their rules


Rule = Callable[[Results], Iterable[Finding]]
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    """Register a rule (a decorator)."""
    RULES.append(function)
    return function


def findings_of(found: Results, limit: int = MAX_FINDINGS) -> list[Finding]:
    """Every rule's findings above MIN_SHARE of the time they are measured against, largest first."""
    out = []
    for check in RULES:
        out.extend(check(found))
    floor = MIN_SHARE * max(found.busy_ns, 1)
    out = [f for f in out if f.ns >= floor]
    return sorted(out, key=lambda f: -f.ns)[:limit]


def lines_of(found: Results) -> list[str]:
    return [finding.line() for finding in findings_of(found)]


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "n/a"


def _ops(ops: dict[str, int]) -> str:
    """The op responsible: the one with the most time, and how many others."""
    named = {op: ns for op, ns in ops.items() if op}
    if not named:
        return "outside any op"
    top = max(named, key=lambda op: named[op])
    more = f" and {len(named) - 1} more ops" if len(named) > 1 else ""
    return f"mostly {_short(top)} {human_ns(named[top])}{more}"


# --- the rules ----------------------------------------------------------------------------------------

CARRIED_IN = "carried_in"     # Results.extra: (kernels, Σ self ns, excluded) launched before the window


@rule
def carried_in(found: Results) -> list[Finding]:
    count, ns, excluded = found.extra.get(CARRIED_IN, (0, 0, False))
    if not count or excluded:
        return []
    return [Finding(f"{human_ns(ns)} of device time ({_pct(ns, found.busy_ns)} of busy) was carried in from "
                    f"before the window: {counted(count, 'kernel')} launched before the profiler started; "
                    "--exclude-carried-in leaves them out", ns, "traceattr check")]


@rule
def exposed_communication(found: Results) -> list[Finding]:
    ns = found.exposed_communication_ns
    if not found.communication_ns or not ns:
        return []
    return [Finding(f"exposed communication {human_ns(ns)} ({_pct(ns, found.busy_ns)} of busy; "
                    f"{_pct(found.communication_ns - ns, found.communication_ns)} of communication hidden "
                    "by compute)", ns, "--by rank")]


@rule
def straggler(found: Results) -> list[Finding]:
    verdict = found.straggler
    if verdict is None or verdict.rank < 0 or not verdict.shows_cause:
        return []
    cause = f", {verdict.cause}" if verdict.cause else ""
    detail = f" ({_short(verdict.details[0], 120)})" if verdict.details and verdict.cause else ""
    waited = f"{human_ns(verdict.wait_caused_ns)} of waiting over {counted(verdict.late_arrivals, 'collective')}"
    if verdict.too_few and not (verdict.consistent or verdict.one_off or verdict.consistent_group):
        # as strong as the data: last at every one, but too few to tell from chance
        unit = "steps" if verdict.steps else "collectives"
        return [Finding(f"rank {verdict.rank} arrived last, {waited}{cause}{detail}; too few {unit} to test it "
                        "against chance", verdict.wait_caused_ns, "--by collective")]
    return [Finding(f"rank {verdict.rank} holds the others back: {waited}{cause}{detail}", verdict.wait_caused_ns,
                    "--by collective")]


@rule
def linked_share(found: Results) -> list[Finding]:
    share = found.linked_share
    if share is None or share != share or share >= LOW_LINKED_SHARE:
        return []
    unlinked = int(round((1 - share) * found.busy_ns))
    what = _LINKED_TO.get(found.level, f"a {found.level}")
    return [Finding(f"only {100 * share:.1f}% of device time linked to {what}: the rest is <unattributed>",
                    unlinked, "--links")]


_LINKED_TO = {"op": "an op", "op_stack": "an op", "module": "an nn.Module", "annotation": "an annotation",
              "step": "a step"}


@rule
def copies(found: Results) -> list[Finding]:
    if found.data is None:
        return []
    by_kind: dict[str, list] = {}
    for (kind, call, op), (count, device_ns, host_ns) in found.data.copies.items():
        entry = by_kind.setdefault(kind, [0, 0, 0, {}, set()])
        entry[0] += count
        entry[1] += device_ns
        entry[2] += host_ns
        entry[3][op] = entry[3].get(op, 0) + host_ns
        entry[4].add(call)
    out = []
    for kind, (count, device_ns, host_ns, ops, calls) in by_kind.items():
        # either kind holds the host until the copy is done (a pageable one is staged by the driver)
        advice = "; pinned memory makes it asynchronous" if kind == PAGEABLE_ASYNC else ""
        holds = "holds" if count == 1 else "hold"
        text = (f"{kind} ({', '.join(_short(call) for call in sorted(calls))}): {counted(count, 'call')} {holds} "
                f"the host {human_ns(host_ns)}, {human_ns(device_ns)} on the device ({_ops(ops)}){advice}")
        ns = max(host_ns, device_ns)
        out.append(Finding(text, ns, "--by op"))
    return out


@rule
def sync_calls(found: Results) -> list[Finding]:
    if found.data is None or not found.data.syncs:
        return []
    count = sum(values[0] for values in found.data.syncs.values())
    host_ns = sum(values[1] for values in found.data.syncs.values())
    (call, op), (calls, ns) = max(found.data.syncs.items(), key=lambda item: item[1][1])
    call = _short(call)
    where = f"in {_short(op)}" if op else "outside any op"
    return [Finding(f"host blocked in synchronize calls {human_ns(host_ns)} over {counted(count, 'call')}; the "
                    f"largest: {call} {where}, {human_ns(ns)} over {calls}", host_ns, "--by op")]


@rule
def short_kernels(found: Results) -> list[Finding]:
    """Activities under launch.SHORT_NS, when they dominate (docs/roofline.md, launch section)."""
    if found.data is None:
        return []
    count, activities, ns = found.data.short
    if not count or not (ns >= SHORT_BUSY_SHARE * found.busy_ns or count >= SHORT_COUNT_SHARE * activities):
        return []
    ops = f"; by launching op: {_ops(found.data.short_ops)}" if found.data.short_ops else ""
    return [Finding(f"activities under {SHORT_NS // 1000} µs: {count:,} of {activities:,}, {human_ns(ns)} "
                    f"({_pct(ns, found.busy_ns)} of busy){ops}", ns, "--by launch")]


@rule
def gaps(found: Results) -> list[Finding]:
    if found.data is None:
        return []
    count = sum(values[0] for values in found.data.gaps.values())
    total = sum(values[1] for values in found.data.gaps.values())
    if not count:
        return []
    rank, longest = max(((r, v[2]) for r, v in found.data.gaps.items()), key=lambda item: item[1])
    where = f" (on rank {rank})" if found.ranks > 1 else ""
    return [Finding(f"device idle in {counted(count, 'gap')} of {human_ns(GAP_MIN_NS)} or more: {human_ns(total)} "
                    f"({_pct(total, found.window_ns)} of the windows), the longest {human_ns(longest)}{where}"
                    f"{_gap_host(found.data.gap_ops)}", total, "--by rank")]


def _gap_host(gap_ops: dict[str, int]) -> str:
    """What the host ran through the gaps: the op holding most of their time, or that it ran no op."""
    if not gap_ops:
        return ""
    top = max(gap_ops, key=lambda op: gap_ops[op])
    if not top:
        return f"; the host ran no cpu op through {human_ns(gap_ops[top])} of them"
    return f"; the host was in {_short(top)} through {human_ns(gap_ops[top])} of them"


# --- compare ------------------------------------------------------------------------------------------

COMPARE = "compare"        # Results.extra key: compare()'s table (analysis/compare.py)


@rule
def compare_change(found: Results) -> list[Finding]:
    """The busy time's change and the largest key's, each with its size and, apart, whether it is beyond
    step-to-step noise."""
    table = found.extra.get(COMPARE)
    if table is None or not len(table):
        return []
    out = []
    steps = int(table.attrs.get("min_steps", MIN_VERDICT_STEPS))
    total = table[table["kind"] == "total"]
    if len(total):
        row = total.iloc[0]
        out.append(Finding(f"busy time {_signed(row['delta_ns'])} from A to B ({_pct_change(row)}); "
                           f"{_judged(row, steps)}", abs(int(row["delta_ns"])), "--by category"))
    keys = table[table["kind"] == "key"]
    if len(keys):
        row = keys.loc[keys["delta_ns"].abs().idxmax()]
        if row["delta_ns"]:
            out.append(Finding(f"largest change: {_short(row['key'])} {_signed(row['delta_ns'])} "
                               f"({_pct_change(row)}); {_judged(row, steps)}", abs(int(row["delta_ns"])), "--top 10"))
    return out


def _signed(ns) -> str:
    ns = int(ns)
    return ("+" if ns > 0 else "-" if ns < 0 else "") + human_ns(abs(ns))


def _pct_change(row) -> str:
    pct = row["delta_pct"]
    return "new in B" if pct != pct else f"{pct:+.1f}%"


def _judged(row, steps: int) -> str:
    """Whether the change is beyond step-to-step noise, apart from its size: a test that rejects on few steps
    still rejects, but "within noise" from fewer than MIN_VERDICT_STEPS says nothing (noise.py)."""
    status, p = row["status"], row["p_value"]
    if status == "noise" and steps < MIN_VERDICT_STEPS:
        return f"too few steps to test against step-to-step noise ({steps})"
    if status in ("changed", "noise"):
        return ("beyond" if status == "changed" else "within") + f" step-to-step noise ({p_text(p)})"
    if status == "untested":
        return "not tested: no step-to-step noise estimate (too few steps, or time outside steps)"
    return status


def _short(name: str, limit: int = 60) -> str:
    """A name (of any length: kernels of 300,000 characters were seen) in one line of at most `limit`."""
    name = " ".join(str(name).split())
    return name if len(name) <= limit else name[:limit - 1] + "…"


def compare_findings(table, side_a: Results, side_b: Results, limit: int = MAX_FINDINGS) -> list[str]:
    """A comparison's findings: its own (the change) and each side's, labelled, largest first."""
    found = [(f, "") for f in findings_of(Results(busy_ns=max(side_a.busy_ns, side_b.busy_ns),
                                                  extra={COMPARE: table}), limit)]
    for label, side in (("A", side_a), ("B", side_b)):
        found += [(f, f"{label}: ") for f in findings_of(side, limit)]
    found.sort(key=lambda item: -item[0].ns)
    return [label + f.line() for f, label in found[:limit]]
