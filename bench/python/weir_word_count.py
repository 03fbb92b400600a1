"""Word count on Weir for Python, for bench/python/run.py.

Usage: weir_word_count.py <bootstrap> <application id> <input> <output> <state dir> <guarantee>
Runs until SIGTERM. Lines (str) in; per-word counts (JSON) out.
"""

import signal
import sys
import threading

from weir import KafkaStreams, Serde, StreamsBuilder


def main(bootstrap, application_id, source, sink, state_dir, guarantee):
    builder = StreamsBuilder()
    (
        builder.stream(source, Serde.str(), Serde.str())
        .flat_map_values(str.split)
        .group_by(lambda _key, word: word, key_serde=Serde.str())
        .count(store="counts")
        .to_stream()
        .to(sink, value_serde=Serde.json())
    )
    streams = KafkaStreams(
        builder.build(),
        {
            "application_id": application_id,
            "bootstrap_servers": bootstrap,
            "processing_guarantee": guarantee,
            "commit_interval_ms": 100,
            "state_dir": state_dir,
        },
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    while not stop.wait(0.1):
        if streams.state == "ERROR":
            sys.exit(f"failed: {streams.error}")
    streams.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
