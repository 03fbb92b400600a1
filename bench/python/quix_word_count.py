"""Word count on Quix Streams, for bench/python/run.py: the same topology
as weir_word_count.py (split, group by word through a repartition topic,
count in a RocksDB-backed state with a changelog).

Usage: quix_word_count.py <bootstrap> <consumer group> <input> <output> <state dir> <guarantee>
Runs until SIGTERM (Quix Streams stops on it).
"""

import sys

from quixstreams import Application


def count(word, state):
    n = state.get("count", 0) + 1
    state.set("count", n)
    return n


def main(bootstrap, group, source, sink, state_dir, guarantee):
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        commit_interval=0.1,
        state_dir=state_dir,
        processing_guarantee="exactly-once" if guarantee == "exactly_once_v2" else "at-least-once",
        loglevel="WARNING",
    )
    lines = app.topic(source, key_deserializer="str", value_deserializer="str")
    counts = app.topic(sink, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(lines)
    sdf = sdf.apply(str.split, expand=True)
    sdf = sdf.group_by(
        lambda word: word,
        name="word",
        key_serializer="str",
        key_deserializer="str",
        value_serializer="json",
        value_deserializer="json",
    )
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(counts)
    app.run()


if __name__ == "__main__":
    main(*sys.argv[1:7])
