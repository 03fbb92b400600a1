"""Python word count: Weir for Python against Quix Streams, side by side.

Run by `scripts/bench python` (which builds Weir for Python, installs Quix
Streams from PyPI into a virtual environment of its own, and starts or uses
the broker). This driver runs in Quix Streams' environment (it uses
confluent-kafka for the admin work and the read-back), starts each system
as a child process, and rewrites the `python` section of BENCHMARKS.md.

For each guarantee and repetition, each system (interleaved) reads the same
pre-loaded input topic (lines of words; 2 partitions) with a fresh
application id and output topic, splits lines into words, groups by word
(a repartition topic) and counts per word in RocksDB-backed state with a
changelog; the output is the count per word update (JSON). The clock
starts when the group's committed input offsets pass the warm-up lines and
stops when they reach the end; throughput is the lines (and words) between
then and the moment the output, read with read_committed as it is
written, holds the exact count of every word (so the repartitioned half
is inside the window); CPU is the process's utime + stime over the window
(every thread; librdkafka's too). A run that never gets there fails.
"""

import argparse
import collections
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).parent
TICK = os.sysconf("SC_CLK_TCK")
PARTITIONS = 2


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def create_topics(bootstrap, names):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names])
    for f in futures.values():
        f.result(30)


def load(bootstrap, topic, lines):
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
    )
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, key=str(i % 1000).encode(), value=line.encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "the input was not written"


def committed(consumer, topic):
    parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    return sum(max(tp.offset, 0) for tp in parts)


class Output:
    """The output topic read with read_committed as it is written: the
    latest count per word."""

    def __init__(self, bootstrap, topic):
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-reader-{uuid.uuid4()}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.latest = {}

    def read(self, timeout):
        for msg in self.consumer.consume(10_000, timeout):
            if msg.error() is None:
                self.latest[msg.key().decode()] = json.loads(msg.value())


def run_once(args, system, guarantee, source, lines_total, words_total, truth):
    app = f"bench-py-{system}-{uuid.uuid4().hex[:8]}"
    sink = f"{app}-out"
    create_topics(args.bootstrap, [sink])
    python = args.weir_python if system == "weir" else args.quix_python
    program = HERE / ("weir_word_count.py" if system == "weir" else "quix_word_count.py")
    with tempfile.TemporaryDirectory() as state_dir, open(Path(state_dir) / "log", "w+") as log:
        proc = subprocess.Popen(
            [python, str(program), args.bootstrap, app, source, sink, state_dir + "/state", guarantee],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        watcher = Consumer({"bootstrap.servers": args.bootstrap, "group.id": app})
        output = Output(args.bootstrap, sink)
        warm = int(lines_total * args.warmup_fraction)
        start = end = None
        cpu_start = cpu_end = 0.0
        warm_at = 0
        deadline = time.monotonic() + args.timeout
        try:
            # The window opens when the input's committed offsets pass the
            # warm-up lines and closes when the committed output holds every
            # word's exact count (the repartitioned half done too).
            while time.monotonic() < deadline and proc.poll() is None:
                if start is None:
                    n = committed(watcher, source)
                    if n >= warm:
                        start, cpu_start, warm_at = time.monotonic(), cpu_seconds(proc.pid), n
                output.read(0.05)
                if start is not None and output.latest == truth:
                    end, cpu_end = time.monotonic(), cpu_seconds(proc.pid)
                    break
            rss = peak_rss_mib(proc.pid) if proc.poll() is None else float("nan")
            got = output.latest
        finally:
            watcher.close()
            output.consumer.close()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            log.seek(0)
            tail = log.read()[-3000:]
    if end is None:
        wrong = sum(1 for w in truth if got.get(w) != truth[w])
        print(f"{system}: {wrong} of {len(truth)} words not exact after {args.timeout} s\n{tail}", file=sys.stderr)
        return None
    exact = got == truth
    done_at = lines_total
    if not exact:
        wrong = sum(1 for w in truth if got.get(w) != truth[w])
        print(f"{system}: {wrong} of {len(truth)} words wrong\n{tail}", file=sys.stderr)
    secs = end - start
    lines = done_at - warm_at
    words = lines * words_total / lines_total
    return {
        "lines_per_s": lines / secs,
        "words_per_s": words / secs,
        "cpu_per_m_words": (cpu_end - cpu_start) / words * 1e6,
        "rss": rss,
        "secs": secs,
        "exact": exact,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--lines", type=int, default=int(os.environ.get("BENCH_PY_LINES", 600_000)))
    p.add_argument("--words-per-line", type=int, default=5)
    p.add_argument("--vocabulary", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=int(os.environ.get("BENCH_REPEAT", 3)))
    p.add_argument("--warmup-fraction", type=float, default=0.2)
    p.add_argument("--guarantees", default=os.environ.get("BENCH_GUARANTEES", "exactly_once_v2,at_least_once"))
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--weir-python", required=True)
    p.add_argument("--quix-python", default=sys.executable)
    p.add_argument("--out", default=str(HERE.parent.parent / "BENCHMARKS.md"))
    args = p.parse_args()

    began = time.monotonic()
    rng = random.Random(42)
    vocab = [f"w{i}" for i in range(args.vocabulary)]
    lines = [" ".join(rng.choice(vocab) for _ in range(args.words_per_line)) for _ in range(args.lines)]
    truth = dict(collections.Counter(w for line in lines for w in line.split()))
    words_total = args.lines * args.words_per_line
    source = f"bench-py-lines-{uuid.uuid4().hex[:8]}"
    create_topics(args.bootstrap, [source])
    load(args.bootstrap, source, lines)

    from importlib.metadata import version

    results = collections.defaultdict(list)
    guarantees = args.guarantees.split(",")
    for guarantee in guarantees:
        for rep in range(args.repeat):
            for system in ("weir", "quix"):
                r = run_once(args, system, guarantee, source, args.lines, words_total, truth)
                print(f"{guarantee} {system} run {rep + 1}: {r}", file=sys.stderr)
                results[(guarantee, system)].append(r)
    write_report(args, results, guarantees, version("quixstreams"), time.monotonic() - began)


def write_report(args, results, guarantees, quix_version, took):
    names = {"weir": "Weir for Python", "quix": f"Quix Streams {quix_version}"}
    rows = []
    for guarantee in guarantees:
        medians = {}
        for system in ("weir", "quix"):
            runs = [r for r in results[(guarantee, system)] if r and r["exact"]]
            failed = len(results[(guarantee, system)]) - len(runs)
            if not runs:
                rows.append(f"| `{guarantee}` | {names[system]} | all {failed} runs failed | | | | | |")
                continue
            med = {k: statistics.median(r[k] for r in runs) for k in ("lines_per_s", "words_per_s", "cpu_per_m_words", "rss", "secs")}
            lo, hi = min(r["words_per_s"] for r in runs), max(r["words_per_s"] for r in runs)
            medians[system] = med
            note = f" ({failed} failed)" if failed else ""
            rows.append(
                f"| `{guarantee}` | {names[system]} | {med['words_per_s']:,.0f} | {lo:,.0f}–{hi:,.0f} | "
                f"{med['lines_per_s']:,.0f} | {med['cpu_per_m_words']:.1f} | {med['rss']:.0f} | {med['secs']:.1f}{note} |"
            )
        if len(medians) == 2:
            w, q = medians["weir"], medians["quix"]
            rows.append(
                f"| `{guarantee}` | Weir ÷ Quix Streams | {w['words_per_s'] / q['words_per_s']:.2f}× | | | "
                f"{w['cpu_per_m_words'] / q['cpu_per_m_words']:.2f}× | {w['rss'] / q['rss']:.2f}× | |"
            )
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    section = f"""<!-- python:begin -->
## Python word count: Weir for Python against Quix Streams

Regenerate: `scripts/bench python` (bench/python/run.py; {took:.0f} s). The same word count in both: lines (str) → split into words → group by word (a repartition topic) → count per word in RocksDB-backed state with a changelog → the count per update (JSON) to an output topic; Python callables for the split and the key in both. Input: {args.lines:,} lines of {args.words_per_line} words from a vocabulary of {args.vocabulary:,} ({args.lines * args.words_per_line:,} words) in {PARTITIONS} partitions, loaded before each system starts. Each system runs as its own process with one processing thread and a commit interval of 100 ms, {args.repeat} times per guarantee, interleaved; the clock starts when the group's committed input offsets pass {args.warmup_fraction:.0%} of the lines and stops when the output, read with `read_committed` as it is written, holds the exact count of every word (a run that never gets there fails); CPU is utime + stime of the process (every thread) over that window, per million words. Weir for Python is built as a wheel in the dev profile with Weir and its Python module at opt-level 3 (librdkafka and RocksDB at opt-level 2); Quix Streams {quix_version} from PyPI with its defaults otherwise. Load average at the end: {load}.

| guarantee | system | words/s | range | lines/s | CPU s / M words | peak RSS MiB | window s |
| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |
""" + "\n".join(rows) + "\n<!-- python:end -->\n"
    out = Path(args.out)
    text = out.read_text()
    if "<!-- python:begin -->" in text:
        before, rest = text.split("<!-- python:begin -->", 1)
        after = rest.split("<!-- python:end -->", 1)[1].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    out.write_text(text)
    print(section)


if __name__ == "__main__":
    main()
