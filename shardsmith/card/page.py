"""The card as one HTML page: CSS in the page, pictures as data: URIs, charts as inline SVG, no script and no
link outside it; it opens from disk in any browser and prints.

Guarantees: every text that came from the inputs (labels, URIs, error details, tags, option values) goes through
`svg.text` (escaped for HTML, unprintable characters shown as escapes), so `<img src=x onerror=...>` as a label is
shown as those characters; tables are capped (MAX_TABLE_ROWS) and say so.
"""

from __future__ import annotations

import json

from shardsmith.card.facts import CardFacts
from shardsmith.card.svg import MAX_BARS, MAX_CELLS, bar_chart, heatmap, scatter, text
from shardsmith.card.thumbnails import Thumbnail
from shardsmith.format.metadata_schema import Metadata, SplitEntry
from shardsmith.read.plots import distinct_per_batch, ideal_distinct_per_batch

MAX_TABLE_ROWS = 2_000
BATCH = 32

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;color:#222;
padding:0 16px}
h1{margin-bottom:0}h2{border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:34px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.sub{color:#555}.grid{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 12px}
figure{margin:0;width:118px;font-size:10px;word-break:break-all;color:#555}
figure img{display:block;width:112px;height:112px;object-fit:contain;background:#eee}
.missing{display:flex;width:112px;height:112px;background:#eee;align-items:center;justify-content:center}
.chart text{font:11px system-ui,sans-serif}code{background:#f3f3f3;padding:0 3px}
.pair{display:flex;gap:10px;align-items:flex-start;margin:8px 0}.warn{color:#a30}
@media print{h2{break-after:avoid}figure{break-inside:avoid}}
"""


def render(facts: CardFacts) -> bytes:
    """The whole page, UTF-8."""
    m = facts.metadata
    sections = [_header(facts), _splits(m), _examples(facts), _errors(facts), _duplicates(facts), _changes(facts),
                _mixing(facts), _read_check(facts)]
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{text(m.name)} '
            f'{text(facts.build_id)}: dataset card</title><style>{STYLE}</style></head><body>\n'
            + "\n".join(sections)
            + '\n<p class="sub">Made by <code>shardsmith card</code> from the files of this version\'s build '
              "folder. docs/card.md says what each section shows.</p>\n</body></html>\n")
    return page.encode("utf-8")


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), total: int | None = None) -> str:
    shown = rows[:MAX_TABLE_ROWS]
    out = ["<table>" + ("<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" if any(head) else "")]
    for row in shown:
        out.append("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    count = total if total is not None else len(rows)
    if count > len(shown):
        out.append(f'<p class="sub">first {len(shown):,} of {count:,} rows</p>')
    return "".join(out)


def _header(facts: CardFacts) -> str:
    m = facts.metadata
    current = next((v.current for v in facts.versions if v.id == facts.build_id), False)
    facts_rows = [
        ["version", f"<code>{text(facts.build_id)}</code>" + (" (the published version)" if current else "")],
        ["tags", ", ".join(text(t) for t in facts.tags) or "none"],
        ["build started / published (UTC)", f"{text(facts.started or '?')} / {text(facts.published or '?')}"],
        ["task", text(m.task_or_default)], ["seed", text(m.seed)],
        ["records", f"{m.num_examples or 0:,} from {m.num_input_rows or 0:,} input rows, {m.error_count:,} errors"],
        ["format", f"{text(m.format or 'tfrecord')}, compression {text(m.compression_or_default)}, images "
                   f"{text(m.image_mode or 'bytes')}"],
    ]
    options = "".join(f"<tr><td><code>--{text(k)}</code></td><td>{text(json.dumps(v, ensure_ascii=False))}</td></tr>"
                      for k, v in (m.options or {}).items())
    notes = "".join(f'<p class="warn">{text(note)}</p>' for note in facts.notes)
    return (f"<h1>{text(m.name)}</h1><p class=\"sub\">dataset card of {text(facts.output_dir)}</p>{notes}"
            + _table(["", ""], facts_rows)
            + f"<details><summary>how it was built: every option as used ({len(m.options or {})})</summary>"
              f"<table>{options}</table></details>")


def _shard_range(entry: SplitEntry) -> str:
    counts = [s.num_examples or 0 for s in entry.shards]
    sizes = [s.num_bytes or 0 for s in entry.shards]
    if not counts:
        return "no shards"
    return (f"{min(counts):,}-{max(counts):,} records, {min(sizes) / 1e6:.1f}-{max(sizes) / 1e6:.1f} MB")


def _splits(m: Metadata) -> str:
    rows = [[text(name), f"{e.num_examples or 0:,}", f"{len(e.shards):,}", _shard_range(e),
             f"{(e.num_bytes or 0) / 1e6:,.1f}"] for name, e in m.splits.items()]
    out = ["<h2 id=\"splits\">Splits and labels</h2>",
           _table(["split", "records", "shards", "shard sizes", "MB"], rows, {1, 2, 4})]
    names = list(m.splits)
    label_rows = [[text(label)] + [f"{m.splits[s].label_counts.get(label, 0):,}" for s in names]
                  + [f"{sum(m.splits[s].label_counts.get(label, 0) for s in names):,}"] for label in m.labels]
    out.append(_table(["label", *map(text, names), "all"], label_rows, set(range(1, len(names) + 2))))
    for name, entry in m.splits.items():
        bars = sorted(entry.label_counts.items(), key=lambda item: (-item[1], item[0]))
        more = (f" (the {MAX_BARS} largest of {len(bars):,} labels)" if len(bars) > MAX_BARS else "")
        out.append(f"<h3>{text(name)}: records per label{more}</h3>" + bar_chart(bars, f"{name} records per label"))
    return "\n".join(out)


def _figure(thumb: Thumbnail | None, caption: str) -> str:
    if thumb is None or not thumb.data_uri:
        why = thumb.note if thumb is not None else "not found in the records read"
        return f'<figure><div class="missing">{text(why)}</div>{caption}</figure>'
    return f'<figure><img src="{thumb.data_uri}" alt="{text(thumb.label)}">{caption}</figure>'


def _examples(facts: CardFacts) -> str:
    m, scan = facts.metadata, facts.scan
    if not facts.split:
        return "<h2 id=\"examples\">Examples</h2><p>This version holds no records.</p>"
    out = [f"<h2 id=\"examples\">Examples: the first records of each label in {text(facts.split)}, in shard order</h2>"]
    if len(facts.grid_labels) < len([x for x in m.splits[facts.split].label_counts.values() if x]):
        out.append(f'<p class="sub">the first {len(facts.grid_labels)} labels by id of '
                   f"{len(m.splits[facts.split].label_counts):,}</p>")
    for label in facts.grid_labels:
        name = m.labels[label]
        thumbs = scan.examples.get(label, [])
        figures = "".join(_figure(t, text(t.uri[-60:])) for t in thumbs)
        if not thumbs:
            figures = f'<p class="sub">none in the first {scan.records_read:,} records read</p>'
        out.append(f'<h3 class="label">{text(name)} <span class="sub">(id {label}, '
                   f'{m.splits[facts.split].label_counts.get(name, 0):,} records)</span></h3>'
                   f'<div class="grid" data-label-id="{label}">{figures}</div>')
    return "\n".join(out)


def _errors(facts: CardFacts) -> str:
    if not facts.errors:
        return "<h2 id=\"errors\">Errors</h2><p>Every input row became a record.</p>"
    rows = []
    for reason in facts.errors:
        examples = "<br>".join(f"{text(e.get('split', ''))} <code>{text(str(e.get('uri', ''))[-80:])}</code>"
                               + (f" {text(str(e.get('detail', ''))[:120])}" if e.get("detail") else "")
                               for e in reason.examples)
        rows.append([text(reason.reason), f"{reason.count:,}", examples])
    return ("<h2 id=\"errors\">Errors: rows that did not become records, by reason</h2>"
            + _table(["reason", "rows", "examples (errors.jsonl)"], rows, {1}))


def _duplicates(facts: CardFacts) -> str:
    m = facts.metadata
    out = ["<h2 id=\"duplicates\">Copies</h2>"]
    dup = m.duplicates
    if dup is None or not dup.num_groups:
        out.append("<p>No image occurs more than once (identical bytes).</p>")
    else:
        out.append(f"<p>{dup.num_groups:,} images occur more than once ({dup.num_extra_copies:,} extra copies, "
                   f"{dup.num_groups_across_splits:,} groups across splits); the first {len(facts.identical)}:</p>")
        for group in facts.identical:
            out.append('<div class="pair">' + "".join(
                _figure(facts.pictures.get(copy), f"{text(copy[0])} {text(copy[1][-50:])}") for copy in group)
                + "</div>")
    near = m.near_duplicates
    if near is None:
        out.append("<p class=\"sub\">Near duplicates were not searched (build with <code>--near_duplicates "
                   "report</code>).</p>")
    else:
        out.append(f"<p>{near.num_pairs:,} near-duplicate pairs (hash distance at most {near.max_distance}); "
                   f"the closest {len(facts.near_pairs)}:</p>")
        for pair in facts.near_pairs:
            sides = [pair["first"], pair["second"]]
            differ = ' <b class="warn">labels differ</b>' if pair.get("labels_differ") else ""
            out.append(f'<div class="pair"><span>distance {text(pair.get("distance"))}{differ}</span>' + "".join(
                _figure(facts.pictures.get((s["split"], s["uri"])),
                        f"{text(s['split'])} / {text(s.get('label', ''))} {text(s['uri'][-50:])}") for s in sides)
                + "</div>")
    return "\n".join(out)


def _changes(facts: CardFacts) -> str:
    m = facts.metadata
    out = ["<h2 id=\"changes\">What this version changed</h2>"]
    change = m.incremental
    if change is not None and change.previous:
        out.append(f"<p>Built on version <code>{text(change.previous)}</code> (generation {change.generation} of "
                   f"{change.generations}): {change.num_added_rows:,} rows read "
                   f"({change.num_added_records if change.num_added_records is not None else '?'} records), "
                   f"{change.num_removed_rows:,} rows removed "
                   f"({change.num_removed_records if change.num_removed_records is not None else '?'} records), "
                   f"{change.num_carried_rows:,} carried, {change.num_failed_again:,} failed again, "
                   f"{change.num_rewritten_shards:,} shards rewritten.</p>")
    if facts.compared_with is None:
        out.append("<p>No earlier version is kept to compare with.</p>")
    else:
        version, before, built_on = facts.compared_with
        how = "the version it was built on" if built_on else "the kept version before it (a build of its own)"
        out.append(f"<p>Against <code>{text(version)}</code>, {how}:</p>")
        out.append(_difference(before, m))
    rows = [[f"<code>{text(v.id)}</code>" + (" (published)" if v.current else ""), text(v.started),
             text(v.change()),
             ", ".join(f"{text(s)} {n:,}" for s, n in v.records.items()), f"{v.num_errors:,}",
             ", ".join(text(t) for t in v.tags)] for v in facts.versions]
    out.append("<h3>Kept versions</h3>" + _table(["version", "started", "change", "records", "errors", "tags"], rows,
                                                  {4}))
    if facts.retired:
        out.append("<h3>Retired</h3><ul>" + "".join(f"<li>{text(line)}</li>" for line in facts.retired) + "</ul>")
    return "\n".join(out)


def _difference(before: Metadata, after: Metadata) -> str:
    rows = []
    for split in dict.fromkeys([*after.splits, *before.splits]):
        old = before.splits[split].label_counts if split in before.splits else {}
        new = after.splits[split].label_counts if split in after.splits else {}
        for label in dict.fromkeys([*after.labels, *before.labels]):
            a, b = old.get(label, 0), new.get(label, 0)
            if a != b:
                rows.append([text(split), text(label), f"{a:,}", f"{b:,}", f"{b - a:+,}"])
    added = [label for label in after.labels if label not in before.labels]
    removed = [label for label in before.labels if label not in after.labels]
    lines = [f"<p>records {before.num_examples or 0:,} &rarr; {after.num_examples or 0:,}; errors "
             f"{before.error_count:,} &rarr; {after.error_count:,}; labels added: "
             f"{', '.join(text(x) for x in added) or 'none'}; labels no longer present: "
             f"{', '.join(text(x) for x in removed) or 'none'}</p>"]
    lines.append(_table(["split", "label", "before", "after", "change"], rows, {2, 3, 4}) if rows
                 else "<p>Every split holds as many records of each label as before.</p>")
    return "".join(lines)


def _mix_distance(entry: SplitEntry) -> tuple[float, float]:
    """(mean, largest) total variation distance between each shard's label mix and its split's: 0 is a shard
    that holds the labels in the split's proportions, 1 a shard of labels the split's mix lacks."""
    total = entry.num_examples or 0
    distances = []
    for shard in entry.shards:
        n = shard.num_examples or 0
        if not n or not total:
            continue
        labels = set(entry.label_counts) | set(shard.label_counts)
        distances.append(0.5 * sum(abs(shard.label_counts.get(x, 0) / n - entry.label_counts.get(x, 0) / total)
                                   for x in labels))
    return (sum(distances) / len(distances), max(distances)) if distances else (0.0, 0.0)


def _mixing(facts: CardFacts) -> str:
    m = facts.metadata
    out = ["<h2 id=\"mixing\">Balance and shuffling</h2>",
           "<p>Each shard should hold the labels in its split's proportions (placement draws every row's shard and "
           "position from a keyed hash). Distance: how far a shard's label mix is from its split's (0 the same, "
           "1 nothing in common); records cut from a label-sorted export would be near 1.</p>"]
    rows = []
    for name, entry in m.splits.items():
        mean, largest = _mix_distance(entry)
        rows.append([text(name), f"{len(entry.shards):,}", f"{mean:.3f}", f"{largest:.3f}"])
    out.append(_table(["split", "shards", "mean distance", "largest"], rows, {1, 2, 3}))
    if facts.split:
        entry = m.splits[facts.split]
        labels = [x for x in m.labels if entry.label_counts.get(x)]
        shards = entry.shards
        cols = labels[: max(1, MAX_CELLS // max(1, min(len(shards), 60)))][:60]
        counts = [[s.label_counts.get(x, 0) for x in cols] for s in shards[:60]]
        more = f" (first {len(counts)} shards, {len(cols)} labels)" if len(shards) > 60 or len(labels) > 60 else ""
        out.append(f"<h3>{text(facts.split)}: records per shard and label{more}</h3>"
                   + heatmap([f"shard {i}" for i in range(len(counts))], cols, counts, "records per shard and label"))
        order = facts.scan.first_shard_labels
        if order:
            ours = distinct_per_batch(order, BATCH)
            ideal = ideal_distinct_per_batch([entry.label_counts[x] for x in labels], BATCH)
            out.append(f"<h3>{text(facts.split)}: label against read position in shard 0</h3>"
                       f"<p>Read front to back with no shuffle buffer, the first {len(order):,} records of shard 0 "
                       f"give <b>{ours:.2f}</b> distinct labels per batch of {BATCH} (a uniformly random batch: "
                       f"{ideal:.2f}). A reader's interleave and shuffle buffer only add to this.</p>"
                       + scatter(order, len(m.labels), "label id against read position"))
    return "\n".join(out)


def _read_check(facts: CardFacts) -> str:
    figures = facts.read_check
    head = "<h2 id=\"read-check\">Reading speed on this machine</h2>"
    if not figures:
        return (head + "<p>Not measured yet: <code>shardsmith readcheck " + text(facts.output_dir)
                + " --version " + text(facts.build_id) + " --files</code> reads a pass and adds its figures here.</p>")
    rows = [[text(r.get("reader")), "-", "-", "-", f"skipped: {text(r['skipped'])}"] if r.get("skipped") else
            [text(r.get("reader")), f"{r.get('images_per_s', 0):,.0f}", f"{r.get('cpu_us_per_image', 0):,.0f}",
             f"{r.get('images', 0):,}", text(r.get("how", ""))] for r in figures.get("readers", [])]
    return (head + f"<p>{text(figures.get('verdict', ''))}</p>"
            + _table(["reader", "images/s", "CPU per image (us)", "images", "how"], rows, {1, 2, 3})
            + f"<p class=\"sub\">split {text(figures.get('split'))}, image size {text(figures.get('image_size'))}, "
              f"{text(figures.get('cpus'))} CPUs, measured {text(figures.get('measured'))}</p>")
