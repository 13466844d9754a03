"""Results of compare.py as plain data, their markdown report and the short summary table.

A result set is a JSON-able dict:
    meta      device, driver, torch, attnjit, date, commands (one per shard), protocol text
    timings   one row per (seqlen, head_dim, family, mode, implementation): ms (median), min_ms,
              max_ms, tflops, visible, note (why a row has no time)
    checks    one row per (seqlen, head_dim, family, mode): reference, errors, status
    latency   first-call latency rows; metadata, memory: per (seqlen, head_dim, family)
    failures  messages that make compare.py exit 1
merge() joins the result sets of several shards; render() and summary() format any of them;
publish() prints the report and writes it with its raw results.
"""

import json
from pathlib import Path

from families import FAMILIES, TITLES

IMPLEMENTATIONS = ("attnjit", "SDPA flash", "SDPA cuDNN", "SDPA dense mask", "FlexAttention")
PEERS = IMPLEMENTATIONS[1:]
MODES = ("fwd", "fwd+bwd")


def empty(meta):
    """A result set with `meta` and no rows."""
    return {"meta": meta, "timings": [], "checks": [], "latency": [], "metadata": [],
            "memory": [], "failures": []}


def merge(result_sets):
    """One result set holding the rows of all; meta of the first, commands of all."""
    merged = empty(dict(result_sets[0]["meta"]))
    merged["meta"]["commands"] = [c for r in result_sets for c in r["meta"]["commands"]]
    for result in result_sets:
        for key in ("timings", "checks", "latency", "metadata", "memory", "failures"):
            merged[key].extend(result[key])
    return merged


def load(path):
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def save(result, path):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(result, file, indent=1)
        file.write("\n")


def _config_key(row):
    return (row["seqlen"], row["head_dim"])


def _family_order(row):
    return FAMILIES.index(row["family"]) if row["family"] in FAMILIES else len(FAMILIES)


def _cell(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def speedup(peer_ms, attnjit_ms):
    """attnjit's speedup over a peer (peer time / attnjit time) as text; '-' when either is
    missing."""
    if peer_ms is None or attnjit_ms is None:
        return "-"
    return f"{peer_ms / attnjit_ms:.2f}x"


def _timings_by_case(result):
    """{(seqlen, head_dim, family, mode): {implementation: row}}."""
    cases = {}
    for row in result["timings"]:
        key = (row["seqlen"], row["head_dim"], row["family"], row["mode"])
        cases.setdefault(key, {})[row["impl"]] = row
    return cases


def _checks_by_case(result):
    return {(c["seqlen"], c["head_dim"], c["family"], c["mode"]): c for c in result["checks"]}


def _sorted_cases(cases):
    return sorted(cases, key=lambda key: (key[0], key[1], _family_order({"family": key[2]}),
                                          MODES.index(key[3]) if key[3] in MODES else 9))


def check_text(check):
    """The check column: status and the largest relative error with its tensor."""
    if check is None:
        return "-"
    if check["status"] in ("unchecked", "failed"):
        return f"{check['status']}: {check.get('note', '')}".strip()
    errors = check["errors"]
    worst = max(errors, key=errors.get)
    text = f"{errors[worst]:.1e} ({worst}) vs {check['reference']}"
    return text if check["status"] == "ok" else f"WRONG: {text}"


def timing_table(result):
    """Every timed row: ms, TFLOP/s and attnjit's speedup over it, grouped by size."""
    lines = []
    cases = _timings_by_case(result)
    checks = _checks_by_case(result)
    current = None
    for key in _sorted_cases(cases):
        seqlen, head_dim, family, mode = key
        rows = cases[key]
        first = next(iter(rows.values()))
        if (seqlen, head_dim) != current:
            current = (seqlen, head_dim)
            lines += ["", f"### S={seqlen}, B={first['batch']}, H={first['heads']}, "
                          f"D={head_dim}", "",
                      "| family (visible) | mode | implementation | ms (min-max) | TFLOP/s | "
                      "attnjit speedup | note |",
                      "|---|---|---|---:|---:|---:|---|"]
        ours = rows.get("attnjit", {}).get("ms")
        label = f"{TITLES.get(family, family)} ({first['visible']:.1%})"
        for impl in IMPLEMENTATIONS:
            row = rows.get(impl)
            if row is None:
                continue
            note = row.get("note", "")
            if impl == "attnjit":
                note = check_text(checks.get(key)) + (f"; {note}" if note else "")
            span = "-" if row["ms"] is None else \
                f"{row['ms']:.3f} ({row['min_ms']:.3f}-{row['max_ms']:.3f})"
            lines.append(f"| {label} | {mode} | {impl} | {span} | {_cell(row['tflops'], 0)} | "
                         f"{speedup(row['ms'], ours) if impl != 'attnjit' else ''} | "
                         f"{note.replace('|', '/')} |")
    return lines


def summary(result):
    """The short table: attnjit's TFLOP/s and its speedup over each peer, one line per case."""
    lines = ["| S | D | family | mode | attnjit TFLOP/s | vs SDPA flash | vs SDPA cuDNN | "
             "vs SDPA dense | vs FlexAttention | check |",
             "|---:|---:|---|---|---:|---:|---:|---:|---:|---|"]
    cases = _timings_by_case(result)
    checks = _checks_by_case(result)
    for key in _sorted_cases(cases):
        seqlen, head_dim, family, mode = key
        rows = cases[key]
        ours = rows.get("attnjit", {})
        ratios = []
        for peer in PEERS:
            row = rows.get(peer)
            if row is not None and row["ms"] is None and "skipped" in row.get("note", ""):
                ratios.append("skipped")
            else:
                ratios.append(speedup(row["ms"] if row else None, ours.get("ms")))
        status = checks.get(key)
        status_text = "-" if status is None else status["status"]
        lines.append(f"| {seqlen} | {head_dim} | {TITLES.get(family, family)} | {mode} | "
                     f"{_cell(ours.get('tflops'), 0)} | {' | '.join(ratios)} | {status_text} |")
    return "\n".join(lines) + "\n"


def _latency_lines(result):
    if not result["latency"]:
        return []
    lines = ["", "## First-call latency", "",
             "| implementation | what | ms | note |", "|---|---|---:|---|"]
    for row in result["latency"]:
        lines.append(f"| {row['impl']} | {row['what']} | {_cell(row['ms'], 1)} | "
                     f"{row.get('note', '')} |")
    return lines


def _family_section(rows, heading, cells):
    """`heading` (a title, text and a table's header) and a table row per entry of `rows`,
    sorted by size and family: S, D, family, implementation, cells(row) and the note; nothing
    when there are no rows."""
    if not rows:
        return []
    lines = list(heading)
    for row in sorted(rows, key=lambda r: (_config_key(r), _family_order(r))):
        lines.append(" | ".join([f"| {row['seqlen']}", str(row["head_dim"]),
                                 TITLES.get(row["family"], row["family"]), row["impl"],
                                 *cells(row), row.get("note", "")]) + " |")
    return lines


def _metadata_lines(result):
    return _family_section(
        result["metadata"],
        ["", "## Mask metadata time", "",
         "attnjit host: attnjit.flashmask (the host builders) and the upload to the GPU; "
         "device: attnjit.build_mask; attnjit's min/max tables are made inside each "
         "attention call and counted in its time. FlexAttention: its block mask. Median of "
         "3 calls after the first.", "",
         "| S | D | family | implementation | how | first call ms | ms (median) | note |",
         "|---:|---:|---|---|---|---:|---:|---|"],
        lambda row: [row["how"], _cell(row["first_ms"], 2), _cell(row["ms"], 2)])


def _memory_lines(result):
    return _family_section(
        result["memory"],
        ["", "## Peak GPU memory of one forward+backward step", "",
         "| S | D | family | implementation | step peak MiB | mask data MiB | note |",
         "|---:|---:|---|---|---:|---:|---|"],
        lambda row: [_cell(row["step_mib"], 0), _cell(row["mask_mib"], 1)])


def render(result):
    """The markdown report: header, every timing, latency, metadata, memory, failures and the
    summary table last."""
    meta = result["meta"]
    commands = "\n".join(f"    {command}" for command in meta["commands"])
    lines = [f"# attnjit vs SDPA and FlexAttention on the FlashMask protocol: {meta['device']}",
             "",
             f"Device: {meta['device']}, driver {meta['driver']}, torch {meta['torch']}, "
             f"attnjit {meta['attnjit']}. Date: {meta['date']}. Command(s), on the GPU machine:",
             "", commands, "", meta["protocol"]]
    lines += timing_table(result)
    lines += _latency_lines(result) + _metadata_lines(result) + _memory_lines(result)
    if result["failures"]:
        lines += ["", "**FAILED:**"] + [f"- {failure}" for failure in result["failures"]]
    lines += ["", "## Summary (speedup = peer ms / attnjit ms)", "", summary(result)]
    return "\n".join(lines)


def publish(result, out):
    """Prints render(result) and, with `out`, writes it there and the raw results next to it
    (FILE.json); returns the exit status: 1 when the result has failures."""
    text = render(result)
    if out:
        Path(out).write_text(text)
        save(result, Path(out).with_suffix(".json"))
    print(text, end="")
    return 1 if result["failures"] else 0
