"""The build graph, stage by stage, in the order a row travels:

  ReadManifest -> [GroupBoxRows] -> AssignSplits -> [SplitCarriedRows] -> LookupSizes -> [DropDuplicates]
  -> CountLabels/ComputeVocabulary/AttachLabelIds -> [DropNearDuplicates] -> PlaceRows -> WriteShards -> Report
  (errors.jsonl, labels.txt, metadata.json), with
  AnalyzeLabels (tf.transform; AnalyzeRows with --feature), SummarizeDuplicates (hashes from the writer) and,
  with --near_duplicates, FindNearPairs/ReportNearDuplicates (near_duplicates.jsonl) beside it, and with
  --incremental, RewriteShards (the published version's shards that hold removed rows); an --incremental night's
  FindNearPairs also takes the carried records' signatures (from SplitCarriedRows) and pairs its new images
  with them. A night whose one manifest only had rows appended since the version (ReadManifest says so) parses
  only those and the failed ones, pairs nothing, and finds the published copies of its new images
  (PublishedCopies) for the version's duplicate summary.
  Every stage's rejects leave through its tagged `errors` output and meet in the report.
"""

from __future__ import annotations

import apache_beam as beam

from pipeline.options.build_options import BuildOptions
from shardsmith import progress_signal
from shardsmith.manifest import LINE_FORMATS, FixedLabels
from shardsmith.output_folder import BuildTarget
from shardsmith.shard_writer.parallel_parse import RowHelpers
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions import CarriedVersion
from transforms.duplicates import DropDuplicates, SummarizeDuplicates, with_published
from transforms.feature_stats import AnalyzeRows
from transforms.gather import PerBundleFn
from transforms.group_boxes import GroupBoxRows
from transforms.labels import AnalyzeLabels, AttachLabelIds, ComputeVocabulary, CountLabels
from transforms.lookup_sizes import LookupSizes
from transforms.near_duplicates import DropNearDuplicates, FindNearPairs, ReportNearDuplicates
from transforms.place import PlaceRows, assign_splits
from transforms.read_manifest import ReadManifest, Source
from transforms.report import ReportConfig, WriteReport
from transforms.row_coder import of_batches
from transforms.versions.carried_rows import (
    CARRIED_SIGNATURES,
    SIGNED,
    PublishedCopies,
    SplitCarriedRows,
    gated,
)
from transforms.versions.rewritten_shards import RewriteShards
from transforms.write_shards import WriteShards


def build_graph(pipeline: beam.Pipeline, options: BuildOptions, sources: list[Source], temp_dir: str,
                build_id: str, writer_processes: int = 0, fixed_labels: FixedLabels | None = None,
                carried: CarriedVersion | None = None, fan_out: bool = True):
    """Adds the whole build to `pipeline`; returns the PCollection holding the metadata dict.
    Every file goes into the build's own folder (`builds/<build_id>`, started by pipeline/checks/preflight.py); the
    report publishes it last. `writer_processes` > 0 hands shards to that many local writer processes
    (pipeline/running/runner.py says when). `temp_dir` is tf.transform's scratch folder (--feature only).
    `fixed_labels`: --label_file FILE's list, as the launcher read it. `carried`: with --incremental, the
    published version the build adds to (pipeline/checks/incremental.py): only rows it does not hold go on past
    SplitCarriedRows, and its shards that hold removed rows are rewritten. `fan_out`: whether the rows read
    are spread over the runner's workers (ReadManifest); a run in one process has no other worker to spread to."""
    manifest, placement, records, checks = options.manifest, options.placement, options.records, options.checks
    target = BuildTarget(options.output_dir, build_id)
    files_dir = target.files_dir
    # Only the list of manifest paths is inlined; the rows are read by workers, and travel in RowBatches.
    diffs = carried is not None and not carried.is_first  # the carry-over's partitioned join fans rows out
    # One line manifest: its version records what was read of it, and a night reads only what was appended to it.
    one_line_manifest = len(sources) == 1 and sources[0].kind in LINE_FORMATS and manifest.task != "detection"
    records_manifest = carried is not None and one_line_manifest
    appended_plan = carried.appended if diffs and records_manifest and checks.near_duplicates == "off" else None
    helpers = None  # writer processes parse a large line manifest (shardsmith/shard_writer/parallel_parse.py)
    if writer_processes > 0:
        helpers = RowHelpers(files_dir, writer_processes, look_up_sizes=not diffs and manifest.task != "detection")
    read = (
        pipeline
        | "ListSources" >> beam.Create(sources)
        | "ReadManifest" >> ReadManifest(manifest, fan_out=fan_out and not diffs, digests=records_manifest,
                                          appended=appended_plan, helpers=helpers)
    )
    read_rows, manifest_errors = read.rows, read.errors
    appended = None if appended_plan is None else read.source_reads | "ReadAsAppended" >> beam.Map(lambda r: r.appended)
    images, stage_errors = read_rows, [manifest_errors]
    if manifest.task == "detection":
        images, box_errors = read_rows | "GroupBoxRows" >> GroupBoxRows(manifest)
        stage_errors.append(box_errors)
    rows = of_batches(images | "AssignSplits" >> beam.Map(assign_splits, placement))
    changes = None
    if diffs:
        changes = rows | "SplitCarriedRows" >> SplitCarriedRows(target, carried,
                                                                signatures=checks.near_duplicates != "off",
                                                                appended=appended)
        rows = changes["rows"]
    published = None  # the carried records' HashedImages, compared with the new images (--near_duplicates)
    if changes is not None and checks.near_duplicates != "off":
        published = changes[CARRIED_SIGNATURES]
    sized = rows | "LookupSizes" >> LookupSizes(records)
    candidates = sized.rows
    stage_errors.append(sized.errors)
    if checks.on_duplicate == "drop":
        distinct = candidates | "DropDuplicates" >> DropDuplicates(records, manifest)
        candidates = distinct.rows
        stage_errors.append(distinct.errors)
    near_found = near_dropped = None
    if checks.near_duplicates == "drop":
        near = candidates | "DropNearDuplicates" >> DropNearDuplicates(records, checks, manifest, published)
        candidates, near_found, near_dropped = near.rows, near.found, near.errors
        stage_errors.append(near.errors)
    label_counts = candidates | "CountLabels" >> CountLabels(fixed_labels)
    vocabulary = label_counts | "ComputeVocabulary" >> ComputeVocabulary(fixed_labels)
    if changes is not None:  # nothing is written before the removals passed --max_removed_fraction
        vocabulary = gated(vocabulary, changes["removed_lines"], "AfterRemovalCheck")
    labelled = candidates | "AttachLabelIds" >> AttachLabelIds(vocabulary)
    shard_groups, plan = labelled.rows | "PlaceRows" >> PlaceRows(placement, label_counts, helpers)
    writer = WriterConfig(target, name=options.name, records=records, allowed_prefixes=manifest.allowed_prefixes,
                          list_rows=carried is not None, generation=carried.generation if carried is not None else 1)
    default_writers = options.writer_processes < 0  # one per core, unless the build is small (write_shards.py)
    written = shard_groups | "WriteShards" >> WriteShards(writer, writer_processes, plan if default_writers else None)
    if manifest.features:
        transform_written = labelled.rows | "AnalyzeRows" >> AnalyzeRows(vocabulary, target, temp_dir, manifest,
                                                                          fixed_labels)
    else:
        transform_written = vocabulary | "AnalyzeLabels" >> AnalyzeLabels(target)
    errors = (*stage_errors, labelled.errors, written.errors)  # not flattened: the report writes each where made
    num_placed = plan | "NumPlacedRows" >> beam.Map(lambda p: sum(s.num_examples for s in p.splits.values()))
    _ = num_placed | "NoteProgressTotal" >> beam.Map(progress_signal.set_total)  # a watching launcher's total
    digests, num_digests = written.digests, num_placed
    touched = None  # an appended night's published records identical to a new image
    if changes is not None:  # the version's duplicates: the carried records' images count too
        both = (written.digests, changes["carried_digests"])
        if appended is not None:
            touched = written.digests | "PublishedCopies" >> PublishedCopies(target, carried, appended)
            both += (touched,)
        digests = both | "AllDigests" >> beam.Flatten()
        num_digests = num_placed | "WithCarriedRows" >> beam.Map(
            lambda placed, carried: placed + carried, beam.pvalue.AsSingleton(changes["carried_lines"]))
    duplicates = digests | "SummarizeDuplicates" >> SummarizeDuplicates(num_digests)
    if touched is not None:
        duplicates = duplicates | "WithPublished" >> beam.Map(
            with_published, beam.pvalue.AsSingleton(appended), beam.pvalue.AsList(touched), carried.duplicates)
    report_inputs = {}
    if checks.near_duplicates == "report":
        signed = written.signatures if published is None else (written.signatures, published)
        near_found = signed | "FindNearPairs" >> FindNearPairs(checks)
    if near_found is not None:
        report_inputs["near_duplicates"] = near_found | "ReportNearDuplicates" >> ReportNearDuplicates(
            target, checks, near_dropped, carried.previous if published is not None else None,
            changes[SIGNED] if published is not None else None)
    input_row_counts = (
        read_rows | "RowsPerBatch" >> beam.Map(len),
        manifest_errors | "ManifestErrorsPerBundle" >> beam.ParDo(PerBundleFn(beam.combiners.CountCombineFn())),
        read.source_reads | "RowsSkipped" >> beam.Map(lambda r: r.skipped),  # an appended manifest's carried rows
    ) | "AllInputRows" >> beam.Flatten()
    if records_manifest:
        report_inputs["source_reads"] = read.source_reads
    if changes is not None:
        rewritten = (changes["removed"], changes["removed_lines"]) | "RewriteShards" >> RewriteShards(
            writer, carried, writer_processes)
        report_inputs |= {"carried_lines": changes["carried_lines"], "removed_lines": changes["removed_lines"],
                          "removed_bytes": changes["removed_bytes"], "rewritten": rewritten}
    report = ReportConfig(
        target=target, name=options.name, seed=placement.seed,
        checks=checks, records=records, task=manifest.task, features=manifest.features,
        recorded_options=options.recorded(), retention=options.retention, carried=carried,
        write_card=not options.no_card,
    )
    return {
        "shards": written.shards,
        "plan": plan,
        "vocabulary": vocabulary,
        "errors": errors,
        "input_row_counts": input_row_counts,
        "duplicates": duplicates,
        "transform_written": transform_written,
        **report_inputs,
    } | "Report" >> WriteReport(report)
