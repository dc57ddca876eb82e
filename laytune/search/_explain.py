"""Why a job's best layouts won, or did not, in words read off its records.

A job's best record and its layout reference (identity layouts with the
best's own knobs) are both priced under the job's boundary: the compute
kernel plus each conversion the boundary charges. The difference between
the two prices is the layouts' share, and it has two parts: the kernel's
own time, and the conversions one pays and the other does not. Each buffer
whose layout differs is named with what its policy makes of it.
"""

from __future__ import annotations

from typing import Any

from laytune.records import Boundary, Record

__all__ = ["explain_layouts"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f} ms"


def _price_text(record: Record) -> str:
    price = record.objective
    if price is None:
        return _ms(record.value_s or 0.0)
    parts = [f"kernel {_ms(price.compute_s)}"]
    parts += [f"{c.buffer} {c.direction} {_ms(c.seconds)}" for c in price.charges]
    tail = "" if price.charges else ", nothing to convert"
    return f"{_ms(price.total_s)} = " + " + ".join(parts) + tail


def _charges(record: Record) -> dict[tuple[str, str], float]:
    price = record.objective
    if price is None:
        return {}
    return {(c.buffer, c.direction): c.seconds for c in price.charges}


def _sources(record: Record) -> dict[tuple[str, str], str]:
    """(buffer, direction) -> where the time of that conversion comes from."""
    price = record.objective
    if price is None:
        return {}
    return {(c.buffer, c.direction): c.source for c in price.charges}


def _buffer_line(
    name: str, layout: Any, boundary: Boundary, best: Record, reference: Record
) -> str:
    policy = boundary.policy(name)
    mine, theirs = _charges(best), _charges(reference)
    paid = {d: s for (b, d), s in mine.items() if b == name}
    saved = {d: s for (b, d), s in theirs.items() if b == name}
    sources = _sources(reference)
    where = f"{name} as {layout.index_map}"
    if policy.kind == "constant":
        return f"{where}: a constant, packed once, so free per call"
    if policy.kind == "free":
        return f"{where}: free, its producer or consumer adopts the layout"
    held = policy.layout
    if held is not None and not held.is_identity and not paid:
        cost = (
            " + ".join(f"{d} {_ms(s)} ({sources[name, d]})" for d, s in saved.items())
            or "a conversion"
        )
        return (
            f"{where}: the layout the caller holds it in, so nothing to convert, where "
            f"identity layouts pay {cost} a call to convert it from the caller's layout"
        )
    cost = " + ".join(f"{d} {_ms(s)}" for d, s in paid.items())
    if cost:
        return f"{where}: converted every call ({cost})"
    return f"{where}: nothing to convert"


def _other_layouts(result: Any) -> list[str]:
    """The fastest verified candidate of the job's study whose layouts are not
    all identity, as one line (none when there is none)."""
    frame = result.trials
    if frame is None or len(frame) == 0:
        return []
    families = [c for c in frame.columns if c.startswith("family.")]
    ok = frame[(frame["status"] == "ok") & frame["time_s"].notna()]
    other = ok[(ok[families].fillna("identity") != "identity").any(axis=1)]
    if other.empty:
        return []
    row = other.loc[other["time_s"].idxmin()]
    kernel = row.get("kernel_s")
    parts = ""
    if kernel == kernel and kernel is not None:  # not NaN
        parts = f" = kernel {_ms(kernel)} + conversions {_ms(row['time_s'] - kernel)}"
    return [
        f"  the fastest candidate with other layouts: {_ms(row['time_s'])}{parts} "
        f"(record {int(row['record_id'])})"
    ]


def explain_layouts(result: Any) -> str:
    """What a :class:`~laytune.search.TuneResult`'s best layouts bought over
    identity layouts with the same knobs, end to end, and why: both prices,
    the buffers whose layouts differ, and how much of the difference is the
    kernel's and how much the conversions'. Every figure is read from the
    result's records."""
    best, reference, boundary = result.best, result.reference, result.boundary
    if best is None:
        return "why: no verified candidate, so nothing to explain"
    plain = dict(result.baseline.candidate.knobs) if result.baseline is not None else {}
    knobs = ", ".join(f"{k}={v}" for k, v in best.candidate.knobs if plain.get(k) != v)
    if reference is None or not reference.ok:
        return (
            "why: the layouts' share is not measured: the space holds no candidate with "
            "identity layouts and these knobs (a vector or block the identity layouts "
            "do not admit)"
        )
    changed = [
        (name, layout)
        for name, layout in best.candidate.layouts
        if not layout.index_map.equivalent(reference.candidate.layout(name).index_map, layout.shape)
    ]
    whole = result.speedup
    whole_text = "" if whole is None else f" (the {whole:.2f}x over the baseline)"
    if not changed:
        return "\n".join(
            [
                f"why identity layouts win: {_price_text(best)} under this boundary "
                f"({boundary}): any other layout of a fixed buffer costs a conversion every "
                "call, and no layout tried made the kernel fast enough to repay it",
                *_other_layouts(result),
                f"  the win{whole_text} is the knobs' ({knobs or 'the baseline knobs'})",
            ]
        )
    ratio = reference.value_s / best.value_s  # type: ignore[operator]
    lines = [
        f"why the layouts win {ratio:.2f}x end to end:"
        if ratio > 1.0
        else f"why the layouts do not win ({ratio:.2f}x end to end):",
        f"  identity layouts, the same knobs: {_price_text(reference)} (record {reference.id})",
        f"  the best's layouts:               {_price_text(best)} (record {best.id})",
    ]
    lines += [
        "  " + _buffer_line(name, layout, boundary, best, reference) for name, layout in changed
    ]
    mine, theirs = best.objective, reference.objective
    if mine is not None and theirs is not None:
        kernel = theirs.compute_s - mine.compute_s
        conversions = theirs.conversions_s - mine.conversions_s
        kernel_words = "saved" if kernel >= 0 else "lost"
        conversion_words = "not paid" if conversions >= 0 else "paid more"
        lines.append(
            f"  of the {_ms(theirs.total_s - mine.total_s)} difference: "
            f"{_ms(abs(conversions))} of conversions {conversion_words}, "
            f"{_ms(abs(kernel))} {kernel_words} in the kernel"
        )
    return "\n".join(lines)
