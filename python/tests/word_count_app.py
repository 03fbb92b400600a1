"""A word count instance for the broker tests: runs until SIGTERM.

Usage: word_count_app.py <application id> <input> <output> <state dir>
"""

import os
import signal
import sys
import threading

from weir import KafkaStreams, Serde, StreamsBuilder, init_logging


def main(application_id, source, sink, state_dir):
    init_logging()
    builder = StreamsBuilder()
    (
        builder.stream(source, Serde.str(), Serde.str())
        .flat_map_values(lambda line: line.split())
        .group_by(lambda _key, word: word, key_serde=Serde.str())
        .count(store="counts")
        .to_stream()
        .to(sink, value_serde=Serde.int())
    )
    streams = KafkaStreams(
        builder.build(),
        {
            "application_id": application_id,
            "bootstrap_servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"],
            "processing_guarantee": "exactly_once_v2",
            "commit_interval_ms": 100,
            "state_dir": state_dir,
        },
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    print("started", flush=True)
    while not stop.wait(0.1):
        if streams.state == "ERROR":
            print(f"failed: {streams.error}", file=sys.stderr, flush=True)
            sys.exit(1)
    streams.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
