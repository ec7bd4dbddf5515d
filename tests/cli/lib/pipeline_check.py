"""Checks an effectively-once pipeline's output (tests/cli/consume_pipeline.sh,
format-spec/pipeline.md): given the source topic, the output topic and the
dead-letter topic as `mq-consume -J` lines, and the transform's rule, every
source message has exactly its expected outputs (E2-E4: key, value, index,
headers, timestamp, partition), once, in per-partition source order, or is
in the dead-letter topic exactly once (E8), never both.

    pipeline_check.py IN.json OUT.json DEAD.json OUT_PARTITIONS RULE

RULE names the transform: "main" (tests/cli/consume_pipeline.sh's t.sh),
"cat" (the value, one line, no key) or "spread" (tests/cli/
pipeline_many_partitions.sh's: 8 keyed outputs per value V, key kV.I and
value V.I for I in 0..7).
"""
import json
import sys

from kafka_partition import partition  # Kafka's default partitioner


def outputs(rule, value):
    """[(key, value)] the transform prints for a source value; None: it fails."""
    if rule == "cat":
        return [(None, value)]
    if rule == "spread":
        return [(f"k{value}.{i}", f"{value}.{i}") for i in range(8)]
    # t.sh: ...0 filtered, ...3 split in 3 keyed outputs, ...7 keyless with a
    # suffix, ...9 fails; the rest copied.
    if value.endswith("9"):
        return None
    if value.endswith("0"):
        return []
    if value.endswith("3"):
        return [("a" + value, value + ".a"), ("b" + value, value + ".b"), ("c" + value, value + ".c")]
    if value.endswith("7"):
        return [(None, value + ".x")]
    return [(None, value)]


def main():
    src_path, out_path, dead_path, nparts, rule = sys.argv[1:6]
    nparts = int(nparts)
    load = lambda p: [json.loads(line) for line in open(p) if line.strip()]
    src, out, dead = load(src_path), load(out_path), load(dead_path)
    errors = []
    got = {}  # "in/p/o" -> [(index, key, value, partition, ts)]
    order = {}  # out partition -> [(src partition, src offset, index)]
    for m in out:
        hs = m.get("headers") or []
        names = [h["key"] for h in hs]
        if names != ["mq.src", "mq.src.index"]:
            errors.append(f"E2: output {m['partition']}/{m['offset']} has headers {names}")
            continue
        where, index = hs[0]["value"], int(hs[1]["value"])
        got.setdefault(where, []).append((index, m["key"], m["payload"], m["partition"], m["ts"]))
        st, sp, so = where.split("/")
        order.setdefault(m["partition"], []).append(((st, int(sp)), int(so), index))
    dead_ids = {}
    for m in dead:
        hs = {h["key"]: h["value"] for h in m.get("headers") or []}
        where = f'{hs["mq.dlq.topic"]}/{hs["mq.dlq.partition"]}/{hs["mq.dlq.offset"]}'
        dead_ids[where] = dead_ids.get(where, 0) + 1
    expected_outputs = 0
    for m in src:
        where = f'{m["topic"]}/{m["partition"]}/{m["offset"]}'
        want = outputs(rule, m["payload"])
        have = got.pop(where, [])
        if want is None:
            if dead_ids.get(where) != 1:
                errors.append(f"E8: {where} is {dead_ids.get(where, 0)} times in the dead-letter topic, want 1")
            if have:
                errors.append(f"E8: {where} is dead-lettered and has {len(have)} outputs")
            continue
        if where in dead_ids:
            errors.append(f"E8: {where} succeeds but is in the dead-letter topic")
        expected_outputs += len(want)
        want_full = []
        for i, (k, v) in enumerate(want):
            p = partition(k.encode(), nparts) if k is not None else m["partition"] % nparts
            want_full.append((i, k, v, p, m["ts"]))
        if sorted(have) != want_full:
            errors.append(f"{where}: outputs {sorted(have)}, want {want_full}")
    for where, have in got.items():
        errors.append(f"{where}: {len(have)} outputs of no source message")
    # Per output partition: each source partition's (of each source topic)
    # outputs in source order,
    # a message's in index order.
    for q, seq in order.items():
        last = {}
        for sp, so, index in seq:
            if (so, index) <= last.get(sp, (-1, -1)):
                errors.append(f"order: out partition {q}: {sp}/{so} #{index} after {last[sp]}")
            last[sp] = (so, index)
    for e in errors[:20]:
        print(e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} errors", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {len(src)} source messages, {len(out)} outputs ({expected_outputs} expected), "
          f"{len(dead)} dead letters")


main()
