"""Weir for Python on the real broker (KAFKA_BOOTSTRAP_SERVERS)."""

import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
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
    lines = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(40_000)]
    truth = collections.Counter(word for line in lines for word in line.split())

    half = len(lines) // 2
    broker.produce(source, [(None, line.encode()) for line in lines[:half]])
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "a.log", "w+") as log_a, open(
        Path(tmp) / "b.log", "w+"
    ) as log_b:
        state = [str(Path(tmp) / "a"), str(Path(tmp) / "b")]
        a = start(app, source, sink, state[0], log_a)
        b = start(app, source, sink, state[1], log_b)
        try:
            # Kill A while it is processing: once the first counts are committed.
            deadline = time.monotonic() + 120
            while not broker.read_committed(sink):
                assert time.monotonic() < deadline, "no output within 120 s"
                assert a.poll() is None and b.poll() is None, "an instance exited"
                time.sleep(0.2)
            a.send_signal(signal.SIGKILL)
            a.wait()
            at_kill = sum(c[-1] for c in latest_counts(broker, sink).values())
            first_half = sum(len(line.split()) for line in lines[:half])
            assert at_kill < first_half, "the kill came after the first half was counted"
            broker.produce(source, [(None, line.encode()) for line in lines[half:]])
            a = start(app, source, sink, state[0], log_a)

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
            print(f"counted {at_kill} of {first_half} words when A was killed", file=sys.stderr)
        finally:
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
