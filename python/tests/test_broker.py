"""Weir for Python on the real broker (KAFKA_BOOTSTRAP_SERVERS)."""

import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from weir import Broker

pytestmark = pytest.mark.skipif(
    not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
    reason="needs a broker: KAFKA_BOOTSTRAP_SERVERS (scripts/kafka start)",
)

APP = Path(__file__).with_name("word_count_app.py")


def start(application_id, source, sink, state_dir, log):
    return subprocess.Popen(
        [sys.executable, str(APP), application_id, source, sink, state_dir],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def latest_counts(broker, topic):
    """The committed output: every count per word, in offset order."""
    updates = collections.defaultdict(list)
    for key, value, _partition, _offset in broker.read_committed(topic):
        updates[key.decode()].append(int.from_bytes(value, "big", signed=True))
    return updates


def test_word_count_in_two_python_processes_is_exact_after_a_sigkill():
    broker = Broker()
    app = Broker.unique_name("py-wc")
    source, sink = f"{app}-text", f"{app}-counts"
    broker.create_topics([(source, 4), (sink, 4)])

    rng = random.Random(7)
    words = [f"w{i}" for i in range(300)]
    lines = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(60_000)]
    truth = collections.Counter(word for line in lines for word in line.split())

    # The input arrives while the instances run: batches of 1,000 lines,
    # 50 ms apart (3 s or more in all).
    def feed():
        for i in range(0, len(lines), 1000):
            broker.produce(source, [(None, line.encode()) for line in lines[i : i + 1000]])
            time.sleep(0.05)

    feeder = threading.Thread(target=feed)
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "a.log", "w+") as log_a, open(
        Path(tmp) / "b.log", "w+"
    ) as log_b:
        state = [str(Path(tmp) / "a"), str(Path(tmp) / "b")]
        a = start(app, source, sink, state[0], log_a)
        b = start(app, source, sink, state[1], log_b)
        try:
            feeder.start()
            # Kill A while it is processing: once the first counts are
            # committed, with input still arriving.
            deadline = time.monotonic() + 120
            while not broker.read_committed(sink):
                assert time.monotonic() < deadline, "no output within 120 s"
                assert a.poll() is None and b.poll() is None, "an instance exited"
                time.sleep(0.1)
            a.send_signal(signal.SIGKILL)
            a.wait()
            assert feeder.is_alive(), "the input was all written before the kill"
            at_kill = sum(c[-1] for c in latest_counts(broker, sink).values())
            a = start(app, source, sink, state[0], log_a)
            feeder.join()

            deadline = time.monotonic() + 180
            while True:
                updates = latest_counts(broker, sink)
                final = {word: counts[-1] for word, counts in updates.items()}
                if final == truth:
                    break
                assert all(final.get(w, 0) <= n for w, n in truth.items()), (
                    "a count went past the truth: a record was counted twice"
                )
                assert time.monotonic() < deadline, (
                    f"counts not exact within 180 s: {sum(final.values())} of "
                    f"{sum(truth.values())} words counted"
                )
                assert a.poll() is None and b.poll() is None, "an instance exited"
                time.sleep(0.5)
            # Every committed update of a word counts up: none was lost and
            # redone, none repeated.
            for word, counts in updates.items():
                assert counts == sorted(set(counts)), f"{word}: {counts}"
            print(f"counted {at_kill} of {sum(truth.values())} words when A was killed", file=sys.stderr)
        finally:
            if feeder.is_alive():
                feeder.join()
            for p in (a, b):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in (a, b):
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
            for log in (log_a, log_b):
                log.seek(0)
                sys.stderr.write(log.read()[-4000:])


def test_an_instance_in_this_process_serves_metrics_and_queries_over_http():
    import json
    import urllib.request

    from weir import KafkaStreams, Serde, StreamsBuilder

    broker = Broker()
    app = Broker.unique_name("py-http")
    source, sink = f"{app}-text", f"{app}-counts"
    broker.create_topics([(source, 2), (sink, 2)])
    broker.produce(source, [(None, b"a b a"), (None, b"c a")])

    # Keys in JSON (the default serde): the HTTP server reads a key of a
    # Python store as JSON text.
    builder = StreamsBuilder()
    (
        builder.stream(source, Serde.str(), Serde.str())
        .flat_map_values(str.split)
        .group_by(lambda _key, word: word)
        .count(store="counts")
        .to_stream()
        .to(sink, value_serde=Serde.int())
    )
    with tempfile.TemporaryDirectory() as state_dir:
        streams = KafkaStreams(
            builder.build(),
            {
                "application_id": app,
                "bootstrap_servers": broker.bootstrap_servers,
                "processing_guarantee": "exactly_once_v2",
                "commit_interval_ms": 100,
                "state_dir": state_dir,
                "http_bind": "127.0.0.1:0",
            },
        )
        assert streams.state == "CREATED"
        with streams:
            assert streams.wait_for_state("RUNNING", 60) == "RUNNING"
            deadline = time.monotonic() + 60
            while latest_counts(broker, sink).get('"a"', [0])[-1] != 3:
                assert time.monotonic() < deadline, "no count of 3 for 'a' within 60 s"
                time.sleep(0.2)
            base = f"http://{streams.http_address}"
            metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
            assert "weir_task_processed_records_total" in metrics
            assert "weir_task_processed_records_total" in streams.metrics()
            with urllib.request.urlopen(f"{base}/stores/counts/keys/%22a%22", timeout=10) as response:
                answer = json.loads(response.read())
            assert answer["value"] == 3, answer
        assert streams.state == "NOT_RUNNING"
        assert streams.error is None
