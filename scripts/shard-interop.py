#!/usr/bin/env python3
"""State shards through an Arrow implementation that is not arrow-rs (pyarrow).

    shard-interop.py write --wal WAL.jsonl --dir DIR [--shards N] [--epoch-ms MS]
        writes each execution's shard as production's writer lays it out: the key (hash
        and date computed here, independently of the Rust code), an Arrow IPC *stream* of
        the reference's eight columns and types, plus two columns production does not
        write (a reader must ignore them). An execution whose rows all lack
        prev_event_id gets the all-null Utf8 prev_event_id column. The last execution
        is written to `open.feather`, the others to `sealed.feather`.

    shard-interop.py check --wal WAL.jsonl --dir DIR [--shards N] [--epoch-ms MS]
        reads the shards another writer wrote for every execution of the WAL and checks
        the key, the schema (names, order, types, nullability), the rows (one per event
        id, ascending) and each payload (the slim members plus prev_event_id, as a JSON
        value equal to the WAL envelope's).

Reference: shared/reference/state-shard.md, sections 1, 2 and 5.
"""
import argparse
import datetime
import json
import os
import sys

import pyarrow as pa

SLIM_KEYS = ["event_id", "execution_id", "catalog_id", "event_type", "node_name", "status",
             "context", "result", "meta", "timestamp", "created_at", "parent_execution_id",
             "attempt"]
COLUMNS = ["event_id", "prev_event_id", "event_type", "node_name", "status", "result_ref",
           "extracted", "payload"]


def fnv_shard(tenant, project, eid, shards):
    h = 0xcbf29ce484222325
    for b in tenant.encode() + b"\x1f" + project.encode() + b"\x1f" + str(eid).encode():
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h % max(shards, 1)


def key(eid, kind, shards, epoch_ms):
    ms = epoch_ms + ((eid >> 22) & ((1 << 41) - 1))
    date = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).strftime("%Y-%m-%d")
    return ("noetl/env=dev/region=local/cell=local-0/shard=s%04d/tenant=default/project=default/"
            "date=%s/execution=%d/state/%s.feather" % (fnv_shard("default", "default", eid, shards), date, eid, kind))


def slim(envelope):
    kept = {k: envelope[k] for k in SLIM_KEYS if k in envelope}
    if "prev_event_id" in envelope:
        kept["prev_event_id"] = envelope["prev_event_id"]
    return kept


def first_result_ref(value):
    if isinstance(value, dict):
        if value.get("kind") == "result_ref":
            return value
        for k in sorted(value):
            found = first_result_ref(value[k])
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = first_result_ref(item)
            if found is not None:
                return found
    return None


def executions(wal):
    by_id = {}
    with open(wal) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            by_id.setdefault(e["execution_id"], {})[e["event_id"]] = e
    return by_id


def write(args):
    execs = executions(args.wal)
    ids = sorted(execs)
    for n, eid in enumerate(ids):
        rows = [execs[eid][i] for i in sorted(execs[eid])]
        prevs = [r.get("prev_event_id") for r in rows]
        prev = (pa.array([None] * len(rows), type=pa.utf8()) if all(p is None for p in prevs)
                else pa.array(prevs, type=pa.int64()))
        refs = [first_result_ref(r) for r in rows]
        text = lambda k: pa.array([r.get(k) if isinstance(r.get(k), str) else None for r in rows], type=pa.utf8())
        columns = [
            pa.array([r["event_id"] for r in rows], type=pa.int64()),
            prev,
            pa.array([r.get("event_type") if isinstance(r.get("event_type"), str) else "" for r in rows], type=pa.utf8()),
            text("node_name"),
            text("status"),
            pa.array([ref.get("uri") if ref and isinstance(ref.get("uri"), str) else None for ref in refs], type=pa.utf8()),
            pa.array([json.dumps(ref["extracted"], separators=(",", ":")) if ref and "extracted" in ref else None for ref in refs], type=pa.utf8()),
            pa.array([json.dumps(slim(r), sort_keys=True, separators=(",", ":"), ensure_ascii=False) for r in rows], type=pa.utf8()),
            # Columns production does not write: a reader ignores them.
            pa.array(["extra"] * len(rows), type=pa.utf8()),
            pa.array([1.5] * len(rows), type=pa.float64()),
        ]
        names = COLUMNS + ["worker_note", "score"]
        batch = pa.RecordBatch.from_arrays(columns, names=names)
        kind = "open" if n == len(ids) - 1 else "sealed"
        path = os.path.join(args.dir, key(eid, kind, args.shards, args.epoch_ms))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with pa.OSFile(path, "wb") as sink:
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
    print("wrote %d shards" % len(ids))


def check(args):
    execs = executions(args.wal)
    problems = []
    for eid, events in sorted(execs.items()):
        path = None
        for kind in ("sealed", "open"):
            candidate = os.path.join(args.dir, key(eid, kind, args.shards, args.epoch_ms))
            if os.path.exists(candidate):
                path = candidate
                break
        if path is None:
            problems.append("%d: no shard at its key" % eid)
            continue
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:6] == b"ARROW1":
            problems.append("%d: the IPC file format, not a stream" % eid)
        table = pa.ipc.open_stream(raw).read_all()
        schema = table.schema
        if schema.names != COLUMNS:
            problems.append("%d: columns %s" % (eid, schema.names))
            continue
        if schema.metadata:
            problems.append("%d: schema metadata %s" % (eid, schema.metadata))
        for field in schema:
            if not field.nullable:
                problems.append("%d: %s not nullable" % (eid, field.name))
        prev_type = schema.field("prev_event_id").type
        all_null = all(e.get("prev_event_id") is None for e in events.values())
        want_prev = pa.utf8() if all_null else pa.int64()
        if prev_type != want_prev:
            problems.append("%d: prev_event_id is %s, want %s" % (eid, prev_type, want_prev))
        for name in COLUMNS:
            want = pa.int64() if name == "event_id" else (want_prev if name == "prev_event_id" else pa.utf8())
            if schema.field(name).type != want:
                problems.append("%d: %s is %s" % (eid, name, schema.field(name).type))
        ids = table.column("event_id").to_pylist()
        if ids != sorted(events):
            problems.append("%d: rows %s, want %s" % (eid, ids, sorted(events)))
            continue
        for i, payload in zip(ids, table.column("payload").to_pylist()):
            if json.loads(payload) != slim(events[i]):
                problems.append("%d/%d: payload %s" % (eid, i, payload))
            if json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False) != payload:
                problems.append("%d/%d: payload not sorted compact text: %s" % (eid, i, payload))
    for p in problems[:20]:
        print(p, file=sys.stderr)
    if problems:
        sys.exit("%d problems" % len(problems))
    print("checked %d executions" % len(execs))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument("--wal", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--shards", type=int, default=256)
    parser.add_argument("--epoch-ms", type=int, default=1704067200000)
    args = parser.parse_args()
    {"write": write, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
