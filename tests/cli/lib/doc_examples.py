"""Runs every example of README.md and of each man page's EXAMPLES section.

Examples are read from the files themselves: README.md's indented code lines
(one example each) and each .nf/.fi block of a man page's EXAMPLES (one
script each, roff escapes undone). Each must appear in EXPECT below with the
exit status it must end with, or in NOT_RUN with the reason it cannot run
here; an example missing from both, or an entry that no longer matches any
example, fails the test, so the docs and this list cannot drift apart.

Each document's examples run in order, in a scratch directory of its own
holding the fixture files they name, with the tools under test first on
PATH and MQ_DIR=data (README's -C data is the same directory).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, SRC = sys.argv[1], sys.argv[2]

# Follows, or loops, that only a signal ends: run for FOLLOW_SECONDS, then
# they must still be running (timeout's 124), having failed at nothing.
FOLLOW = 124
FOLLOW_SECONDS = 2

EXPECT = {
    # README.md
    "mq-produce -C data -t logs --create --partitions 4 < app.log     # one message per line": 0,
    "tail -n0 -F app.log | mq-produce -C data -t logs                # each new line appended at once": FOLLOW,
    "mq-produce -C data -t users --create -K '\\t' --fsync batch --print-offsets users.tsv": 0,
    "mq-produce -C data -t events --create --producer-id ingest-7 events.txt  # re-run after a crash: exactly once": 0,
    "mq-consume -C data -t logs -e                      # everything so far, then exit": 0,
    "mq-consume -C data -t logs -o end                  # follow new messages, like tail -f": FOLLOW,
    "mq-consume -C data -t logs -o -10 -e               # the last 10 of each partition": 0,
    "mq-consume -C data -t logs -o 2026-11-30T08:00:00Z -o e@2026-11-30T09:00:00Z -e": 0,
    "mq-consume -C data -t users -J -e | mq-produce -C data -t users-copy -J --create": 0,
    "mq-consume -C data -t logs -f '%p %o %F %k=%s\\n' --header-filter source=web -c 100 -e": 0,
    "mq-consume -C data -t logs -G indexer -e           # from the group's committed offsets": 0,
    "mq-consume -C data -t logs -t '^user' -G audit -e -f '%t %s\\n'   # several topics, one a pattern": 0,
    "mq-consume -C data --describe -G indexer           # offsets, log ends, lag, members": 0,
    "mq-consume -C data --reset-offsets -G indexer -t logs --to-earliest --execute   # replay": 0,
    "mq-consume -C data -t logs -e --dlq logs.dlq --exec sh -c 'grep -q line'   # a command per message": 0,
    "mq-consume -C data -t logs -G short -e --to-topic logs.short --exec awk 'length($0) < 20'   # a pipeline": 0,
    "mq-inspect data/logs-0/00000000000000000000.log            # one line per batch, like kafka-dump-log": 0,
    "mq-inspect -r -d data/logs-0/00000000000000000000.log      # and every record with its key and payload": 0,
    "mq-inspect --json data/logs-0/00000000000000000000.index   # index entries as JSON Lines": 0,
    "mq-inspect --verify data/logs-0                            # CRCs, offsets, records, indexes: exit 0 or 65": 0,
    "mq-topic -C data list                            # each partition: offsets, bytes, segments": 0,
    "mq-topic -C data create clicks --partitions 6 -X retention.ms=3d -X segment.bytes=256MiB": 0,
    "mq-topic -C data config clicks                   # every key, its value, default or topic": 0,
    "mq-topic -C data alter clicks -X retention.ms=12h --partitions 8   # warns how many keys move": 0,
    "mq-topic -C data delete clicks                   # refused while a producer or member holds it": 0,
    # mq-consume(1)
    "mq-consume -t logs -e": 0,
    "mq-consume -t logs -o end -f '%p %o %F %s\\n'": FOLLOW,
    "mq-consume -t logs -p 3 -o -10 -e": 0,
    "mq-consume -t logs -o 2026-11-30T08:00:00Z -o e@2026-11-30T09:00:00Z -e": 0,
    "mq-consume -t events -e -J --header-filter env=prod | jq -r .payload": 0,
    "mq-consume -t src -e -J | mq-produce -t dst --create -J": 0,
    "next=$(cat pos 2>/dev/null || echo 0)\n"
    "mq-consume -t files -p 0 -o \"$next\" -e -f '%o %s\\0' |\n"
    "while IFS=' ' read -r -d '' off name; do\n"
    "    process \"$name\" && echo $((off + 1)) > pos\n"
    "done": 0,
    "for i in 1 2 3; do\n"
    "    mq-consume -t orders -G shipping -e > shipped.$i &\n"
    "done\n"
    "wait\n"
    "cat shipped.* | sort -n | uniq -d | wc -l     # 0: no message twice": 0,
    "mq-consume -t orders -G invoices -e > invoices.txt\n"
    "mq-consume -t orders -G audit -e > audit.txt\n"
    "cmp invoices.txt audit.txt": 0,
    "mq-consume -t orders -t '^logs' -G archive -e -f '%t %p %o %s\\n'": 0,
    "mq-consume -t orders -t '^logs' -G indexer -e --dlq indexer.dlq \\\n"
    "    --exec sh -c 'echo \"$MQ_TOPIC/$MQ_PARTITION/$MQ_OFFSET: $(wc -c) bytes\"'": 0,
    "mkfifo acks\n"
    "mq-consume -t orders -G mailer -e -f '%p %o %s\\n' --ack-fd 3 3<acks |\n"
    "while read -r p o msg; do\n"
    "    echo \"mail $msg\" >> mailed.txt && echo \"$p $o\"\n"
    "done > acks": 0,
    "mq-consume --list\n"
    "mq-consume --describe -G billing": 0,
    "mq-consume --describe -G billing -t orders -J |\n"
    "  jq -r 'select(.type == \"partition\") | \"\\(.partition) \\(.lag)\"'": 0,
    "mq-consume --reset-offsets -G billing -t orders --to-datetime 2026-11-30T08:00:00Z\n"
    "mq-consume --reset-offsets -G billing -t orders --to-datetime 2026-11-30T08:00:00Z --execute": 0,
    "mq-consume --reset-offsets -G billing -t orders --shift-by -10 --execute\n"
    "mq-consume --reset-offsets -G billing -t orders --to-latest --execute": 0,
    "mq-consume --reset-offsets -G billing -t orders --to-latest --export > plan.csv\n"
    "mq-consume --reset-offsets -G reports --from-file plan.csv --execute\n"
    "mq-consume -t orders -G reports -e    # nothing: it starts at the end": 0,
    "for i in 1 2; do\n"
    "    mq-consume -t orders -G billers -e --dlq orders.dlq \\\n"
    "        --exec sh -c 'echo \"billed $(cat)\" >> \"billed.$MQ_PARTITION\"' &\n"
    "done\n"
    "wait": 0,
    "mq-consume -t orders -G billing --member-id biller-1 --session-timeout 60000 -e\n"
    "mq-consume --describe -G billing\n"
    "mq-consume --remove-member biller-1 -G billing": 0,
    "mq-consume --delete -G billing": 0,
    "mq-consume -t logs -e --exec sh -c 'printf \"%s: \" \"$MQ_MESSAGE_ID\"; wc -c'": 0,
    "mq-consume -t logs -e --batch 1000 --exec sh -c 'jq -r .payload | gzip > \"logs-$MQ_PARTITION-$MQ_OFFSET.gz\"'": 0,
    "mq-consume -t orders -e --max-attempts 4 --retry-backoff 50 --dlq orders.dlq \\\n"
    "    --exec sh -c 'test \"$(cat)\" -le 28 || { echo \"order too large\" >&2; exit 1; }'\n"
    "mq-consume -t orders.dlq -e -J | jq -c '[.payload, (.headers | from_entries)]'": 0,
    "mq-consume -t orders -G big -e --to-topic orders.big \\\n"
    "    --exec awk '$1 > 20 { print \"big order: \" $1 }'\n"
    "mq-consume -t orders.big -e -f '%s (from %h)\\n'": 0,
    # mq-inspect(1)
    "mq-inspect data/orders-0/00000000000000000000.log\n"
    "mq-inspect -d data/orders-0/00000000000000000000.log": 0,
    "mq-inspect data/orders-0/00000000000000000000.index \\\n"
    "           data/orders-0/00000000000000000000.timeindex": 0,
    "mq-inspect --verify data/orders-0 2>problems.txt\n"
    "rc=$?\n"
    "if [ $rc -ne 0 ]; then\n"
    "  echo \"orders-0 is damaged (exit $rc)\"; cat problems.txt\n"
    "fi": 0,
    "mq-inspect -J -d data/orders-0/00000000000000000000.log |\n"
    "  jq -r 'select(.type == \"record\") | \"\\(.offset) \\(.key)\"'": 0,
    "mq-inspect data/groups/billing/offsets\n"
    "mq-inspect --verify data/groups/billing/offsets": 0,
    "mq-inspect data/orders-0/leader-epoch-checkpoint \\\n"
    "           data/orders-0/high-watermark": 0,
    # mq-replicate(1)
    "mq-isr --cluster cl create -t orders --partitions 2 --replicas r0,r1,r2\n"
    "seq 1000 | mq-produce -C r0 -t orders -p 0 --acks 1\n"
    "mq-replicate -C r1 -v": 0,
    # mq-isr(1): in order, in one scratch directory
    "mq-isr --cluster cluster create -t payments --partitions 3 --replicas r0,r1,r2 \\\n"
    "    --min-insync-replicas 2 -X retention.ms=86400000\n"
    "mq-isr --cluster cluster describe -t payments": 0,
    "if ! mq-isr --cluster cluster --check > check.txt; then\n"
    "    mail -s \"mq: partitions need attention\" root < check.txt\n"
    "fi": 0,
    "mq-isr --cluster cluster --verify-replicas -t payments": 0,
    "mv r0 r0.lost\n"
    "mq-isr --cluster cluster describe --unavailable\n"
    "mq-isr --cluster cluster elect": 0,
    "mq-isr --cluster cluster describe --json |\n"
    "  jq -c 'select(.type == \"partition\") | [.topic, .partition, .leader, .isr]'": 0,
    "mq-isr --cluster cluster describe --json |\n"
    "  jq -r 'select(.type == \"partition\") | .topic as $t | .partition as $p\n"
    "         | .replica_lag[] | select(.lag > 1000 or .lag_ms > 60000)\n"
    "         | \"\\($t)-\\($p) replica \\(.replica): \\(.lag) behind, \\(.lag_ms) ms\"'": 0,
    # mq-produce(1)
    "mq-produce -C data -t logs --create --partitions 4 app.log": 0,
    "tail -n0 -F access.log | mq-produce -t access --create": FOLLOW,
    "cut -f1,3 users.tsv | mq-produce -t users --create -K '\\t' --fsync batch \\\n"
    "    --print-offsets > offsets.txt": 0,
    "until mq-produce --producer-id ingest-7 -t events --create events.ndjson; do\n"
    "    sleep 1\n"
    "done": 0,
    "mq-consume -t src -e -J | mq-produce -t dst --create -J -z zstd": 0,
    "mq-consume -t src -e -J | mq-produce -t mirror --create --like src -J --keep-partition": 0,
    "find . -name '*.txt' -print0 | mq-produce -t files --create -0": 0,
    # mq(7)
    "mq-consume -t src -e -J | mq-produce -t mirror --create --like src -J --keep-partition": 0,
    # mq(7): the last two lines follow, so the script runs until stopped
    "export MQ_DIR=$HOME/mq\n"
    "mq-produce -t logs --create --partitions 4 < app.log\n"
    "mq-consume -t logs -e | wc -l\n"
    "mq-consume -t logs -o end -f '%p %o %F %s\\n'\n"
    "mq-consume -t logs -e -J | mq-produce -t logs-copy --create -J": FOLLOW,
    # mq-topic(1): in order, in one scratch directory
    "mq-topic create clicks --partitions 6 -X retention.ms=3d -X segment.bytes=256MiB": 0,
    "mq-topic list": 0,
    "mq-topic describe logs --json | jq -r '.partitions[] | [.partition, .log_end_offset] | @tsv'": 0,
    "mq-topic config clicks\n"
    "mq-topic alter clicks -X retention.ms=12h --delete-config segment.bytes": 0,
    "mq-topic alter logs --partitions 8 --dry-run\n"
    "mq-topic alter logs --partitions 8": 0,
    "mq-topic delete clicks": 0,
    # mq-compact(1): in order, in one scratch directory
    "mq-produce -t metrics --create -X segment.bytes=1024 -X retention.bytes=4096 < app.log\n"
    "mq-compact -t metrics\n"
    "mq-compact -t metrics --execute": 0,
    "mq-compact -t metrics --delete-before 150 --execute\n"
    "mq-consume -t metrics -o beginning -c 1 -f '%o\\n'": 0,
}

NOT_RUN = {
    "30 2 * * * mq-compact -C /srv/mq/data --execute --tier-dir /mnt/cold/mq --tier-after 7d -q":
        "a crontab line; tests/cli/compact_tier.sh runs mq-compact --execute --tier-dir the same way",
    "17 * * * * mq-compact -C /srv/mq/data --execute --protect --protect-max-ms 604800000 -q":
        "a crontab line; tests/cli/compact_retention.sh runs mq-compact --execute --protect the same way",
    "* * * * * mq-replicate -C /srv/mq/r1 -q":
        "a crontab line; tests/cli/replication_carry.sh runs mq-replicate once the same way",
    "mq-isr --cluster /srv/mq/cluster create -t orders --partitions 2 "
    "--replicas /srv/mq/r0,b:/srv/mq/r1,c:/srv/mq/r2 --controller a\n"
    '* * * * * MQ_RSH="ssh -i /etc/mq/id_ed25519 -o BatchMode=yes" mq-replicate -C /srv/mq/r1 -q':
        "needs hosts b and c, and a crontab; tests/cli/replication_hosts.sh creates such a topic "
        "and replicates it through a stand-in MQ_RSH",
    "./build.sh demo": "builds the project: run by CI and the fresh-machine check",
    "./build.sh test": "builds and runs every test, this one included",
    'MQ_READER_SEEDS=500 build/tests/unit_tests "reader property*"':
        "a soak run of minutes; CI runs 10 seeds of the same tests in unit_tests",
    "tests/sim/soak.sh 1000000                    # a million schedules, 2 processes":
        "a soak run of minutes; ctest sim.schedules runs 20,000 schedules of the same simulator",
    "MQ_FAILOVER_MODES=all MQ_FAILOVER_RUNS=200 MQ_BIN=build MQ_SRC=. bash tests/cli/replication_failover.sh":
        "a soak run of hours; ctest cli.replication_failover runs 4 seeded runs per mode",
    "MQ_RELAY_ROUNDS=200 MQ_BIN=build MQ_SRC=. bash tests/cli/replication_relay.sh":
        "a soak run of hours; ctest cli.replication_relay runs 4 seeded rounds of faults",
    "build/tests/sim/mq-sim --seed 4711 --trace   # replay one":
        "prints a whole schedule from the build tree; ctest sim.replay replays 500 schedules",
    "mq-inspect -r /var/lib/kafka/orders-0/00000000000000368769.log":
        "needs a Kafka broker's log directory (tests/cli/inspect_dump.sh reads Kafka's bytes)",
}

# README sections whose indented lines are not commands.
README_NOT_COMMANDS = {"Layout"}


def readme_examples(path):
    out, section = [], ""
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("    ") and line.strip() and section not in README_NOT_COMMANDS:
            out.append(line[4:])
    return out


def roff_text(line):
    line = line.replace("\\e", "\\").replace("\\-", "-").replace("\\(aq", "'")
    return re.sub(r"\\f[BIRP]", "", line)


def man_examples(path):
    out, in_examples, block = [], False, None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith(".SH"):
            in_examples = line.strip('" ').endswith("EXAMPLES")
            continue
        if not in_examples:
            continue
        if line == ".nf":
            block = []
        elif line == ".fi" and block is not None:
            lines = [roff_text(x) for x in block]
            indent = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
            out.append("\n".join(x[indent:] for x in lines))
            block = None
        elif block is not None:
            block.append(line)
    return out


def fixtures(work):
    """The files the examples name."""
    with open(os.path.join(work, "app.log"), "w") as f:
        for i in range(200):
            f.write(f"2026-11-30T08:{i % 60:02d}:00Z app line {i}\n")
    with open(os.path.join(work, "access.log"), "w") as f:
        f.write("127.0.0.1 GET /\n")
    with open(os.path.join(work, "users.tsv"), "w") as f:
        for i in range(20):
            f.write(f"user{i}\tactive\tname {i}\n")
    with open(os.path.join(work, "events.txt"), "w") as f:
        f.writelines(f"event {i}\n" for i in range(50))
    with open(os.path.join(work, "events.ndjson"), "w") as f:
        f.writelines(f'{{"n": {i}}}\n' for i in range(50))
    for name in ("a.txt", "b c.txt"):
        open(os.path.join(work, name), "w").write("x\n")


def setup_topics(work, env):
    """Topics the examples read without creating them first."""
    def sh(cmd):
        subprocess.run(["bash", "-c", cmd], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    sh("mq-produce -q -t logs --create --partitions 4 < app.log")
    sh("printf '%s\\n' '{\"payload\":\"a\",\"headers\":[{\"key\":\"env\",\"value\":\"prod\"}]}' "
       "'{\"payload\":\"b\",\"headers\":[{\"key\":\"env\",\"value\":\"dev\"}]}' "
       "| mq-produce -q -t events --create -J")
    sh("seq 1 10 | mq-produce -q -t src --create -K ' '")
    sh("printf 'one.txt\\0two.txt\\0' | mq-produce -q -t files --create -0")
    sh("seq 1 30 | mq-produce -q -t orders --create")
    # A group's offsets file: the worked example of format-spec/group.md §14.2.
    group = os.path.join(work, "data", "groups", "billing")
    os.makedirs(group, mode=0o750)
    with open(os.path.join(group, "offsets"), "wb") as f:
        f.write(bytes.fromhex(
            "4d51474f000100005b30a5d300000001"
            "00000000000000010000018bcfe568000000000000000000ffffffffffffffff"
            "00066f726465727300000000000000000000002a00000000"
            "0000018bcfe56800000000000000000000026d31"))
    # Replica checkpoints: the worked examples of format-spec/replication.md.
    orders = os.path.join(work, "data", "orders-0")
    with open(os.path.join(orders, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n2\n0 0\n3 120\n")
    with open(os.path.join(orders, "high-watermark"), "wb") as f:
        f.write(high_watermark("orders", 0, 42))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def high_watermark(topic, partition, offset):
    """A high-watermark file (format-spec/replication.md R61): copy 0 with
    sequence 1, copy 1 zero."""
    name = topic.encode()
    copy = (b"MQHW" + (1).to_bytes(4, "big") + (1).to_bytes(8, "big") +
            offset.to_bytes(8, "big") + partition.to_bytes(4, "big") +
            len(name).to_bytes(4, "big") + name)
    copy += bytes(508 - len(copy))
    copy += crc32c(copy).to_bytes(4, "big")
    return copy + bytes(512)


def main():
    docs = [("README.md", readme_examples(os.path.join(SRC, "README.md")))]
    for sub in ("man1", "man7"):
        d = os.path.join(SRC, "man", sub)
        for name in sorted(os.listdir(d)):
            docs.append((f"man/{sub}/{name}", man_examples(os.path.join(d, name))))
    failures, seen, ran = [], set(), 0
    for doc, examples in docs:
        work = tempfile.mkdtemp(prefix="mq-doc-")
        try:
            fixtures(work)
            env = dict(os.environ, PATH=BIN + ":" + os.environ["PATH"],
                       MQ_DIR=os.path.join(work, "data"), HOME=work, LC_ALL="C.UTF-8")
            setup_topics(work, env)
            for ex in examples:
                seen.add(ex)
                if ex in NOT_RUN:
                    print(f"{doc}: not run ({NOT_RUN[ex]}): {ex}")
                    continue
                if ex not in EXPECT:
                    failures.append(f"{doc}: example not in doc_examples.py: {ex!r}")
                    continue
                want = EXPECT[ex]
                script = "process() { :; }\n" + ex
                cmd = ["timeout", str(FOLLOW_SECONDS if want == FOLLOW else 60), "bash", "-c", script]
                r = subprocess.run(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                ran += 1
                # A follower must not have failed before it was stopped.
                if r.returncode != want or (want == FOLLOW and b"mq-" in r.stderr):
                    failures.append(f"{doc}: exit {r.returncode}, want {want}: {ex}\n"
                                    f"  stderr: {r.stderr.decode(errors='replace')[:500]}")
                else:
                    print(f"{doc}: exit {r.returncode} as expected: {ex.splitlines()[0]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for ex in list(EXPECT) + list(NOT_RUN):
        if ex not in seen:
            failures.append(f"doc_examples.py lists an example no document has: {ex!r}")
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    print(f"{ran} examples run, {len(failures)} failures")
    return 1 if failures else 0


sys.exit(main())
