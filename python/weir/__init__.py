"""Weir for Python: Kafka Streams' model on Weir's Rust engine.

Build a topology with :class:`StreamsBuilder`, run it with
:class:`KafkaStreams` against a Kafka broker, or test it without one with
:class:`TopologyTestDriver`. Keys and values are Python objects; a
:class:`Serde` converts them to and from Kafka bytes.
"""

from ._weir import (
    BranchedKStream,
    Broker,
    GlobalKTable,
    JoinWindows,
    KafkaStreams,
    KGroupedStream,
    KStream,
    KTable,
    Serde,
    SessionWindowedKStream,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TestInputTopic,
    TestOutputTopic,
    TimeWindowedKStream,
    TimeWindows,
    Topology,
    TopologyTestDriver,
    init_logging,
)

__all__ = [
    "BranchedKStream",
    "Broker",
    "GlobalKTable",
    "JoinWindows",
    "KafkaStreams",
    "KGroupedStream",
    "KStream",
    "KTable",
    "Serde",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindows",
    "StreamsBuilder",
    "TestInputTopic",
    "TestOutputTopic",
    "TimeWindowedKStream",
    "TimeWindows",
    "Topology",
    "TopologyTestDriver",
    "init_logging",
]
