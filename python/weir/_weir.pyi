"""Type stubs of the extension module `weir._weir` (Weir for Python)."""

from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Tuple, Union

Key = Any
Value = Any
WindowKey = Tuple[Any, int, int]
"""A windowed key: `(key, start_ms, end_ms)`."""

class Serde:
    """Converts keys or values between Python objects and Kafka bytes.
    `None` is a Kafka null for every serde."""

    @staticmethod
    def bytes() -> Serde:
        """Raw bytes (`bytes` objects)."""
    @staticmethod
    def str() -> Serde:
        """UTF-8 text, as Kafka's `StringSerde`."""
    @staticmethod
    def int() -> Serde:
        """A 64-bit big-endian integer, as Kafka's `LongSerde` (counts)."""
    @staticmethod
    def int32() -> Serde:
        """A 32-bit big-endian integer, as Kafka's `IntegerSerde`."""
    @staticmethod
    def json() -> Serde:
        """Python objects as compact UTF-8 JSON (dict order kept)."""
    @staticmethod
    def custom(
        serializer: Callable[[Any], Optional[bytes]], deserializer: Callable[[bytes], Any]
    ) -> Serde:
        """A serde from two callables; the deserializer never sees a null."""
    @staticmethod
    def windowed(inner: Serde, size_ms: int) -> Serde:
        """Time-windowed keys `(key, start_ms, end_ms)` (Kafka Streams' `TimeWindowedSerde`)."""
    @staticmethod
    def session_windowed(inner: Serde) -> Serde:
        """Session keys `(key, start_ms, end_ms)` (Kafka Streams' `SessionWindowedSerde`)."""
    def serialize(self, value: Any) -> Optional[bytes]: ...
    def deserialize(self, data: Optional[bytes]) -> Any: ...

class Topology:
    """A built topology; runs once, in a `KafkaStreams` or a `TopologyTestDriver`."""

    @staticmethod
    def shipped(name: str, params: Optional[Mapping[str, str]] = None) -> Topology:
        """A topology that ships with Weir (`word-count`, `events-by-type`,
        `page-views`, `order-enrichment`, `datacenter-monitor`)."""
    @staticmethod
    def shipped_names() -> dict[str, str]: ...
    def describe(self) -> str: ...

class StreamsBuilder:
    """Builds a topology. Serdes not given are the defaults (JSON unless set)."""

    def __init__(
        self, default_key_serde: Optional[Serde] = None, default_value_serde: Optional[Serde] = None
    ) -> None: ...
    def stream(
        self, topic: str, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None
    ) -> KStream: ...
    def table(
        self,
        topic: str,
        key_serde: Optional[Serde] = None,
        value_serde: Optional[Serde] = None,
        store: Optional[str] = None,
    ) -> KTable: ...
    def global_table(
        self,
        topic: str,
        key_serde: Optional[Serde] = None,
        value_serde: Optional[Serde] = None,
        store: Optional[str] = None,
    ) -> GlobalKTable: ...
    def build(self) -> Topology: ...

class KStream:
    """A stream of records. Callables run on Weir's stream threads; an
    exception is a processing error (the configured handler fails the task,
    skips the record or dead-letters it, with the traceback as reason)."""

    def filter(self, predicate: Callable[[Key, Value], bool]) -> KStream: ...
    def filter_not(self, predicate: Callable[[Key, Value], bool]) -> KStream: ...
    def map_values(self, mapper: Callable[[Value], Any]) -> KStream: ...
    def flat_map_values(self, mapper: Callable[[Value], Iterable[Any]]) -> KStream: ...
    def map(self, mapper: Callable[[Key, Value], Tuple[Any, Any]]) -> KStream: ...
    def flat_map(self, mapper: Callable[[Key, Value], Iterable[Tuple[Any, Any]]]) -> KStream: ...
    def select_key(self, selector: Callable[[Key, Value], Any]) -> KStream: ...
    def peek(self, action: Callable[[Key, Value], Any]) -> KStream: ...
    def foreach(self, action: Callable[[Key, Value], Any]) -> None: ...
    def branch(self, *predicates: Callable[[Key, Value], bool]) -> list[KStream]:
        """One stream per predicate; a record goes to the first that holds,
        and is dropped when none does."""
    def split(self, prefix: str = "") -> BranchedKStream:
        """Kafka Streams' `split()`: named branches, ended by
        `default_branch()` or `no_default_branch()` (a dict of streams)."""
    def merge(self, other: KStream) -> KStream: ...
    def to(
        self, topic: str, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None
    ) -> None: ...
    def group_by_key(
        self, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None
    ) -> KGroupedStream: ...
    def group_by(
        self,
        selector: Callable[[Key, Value], Any],
        key_serde: Optional[Serde] = None,
        value_serde: Optional[Serde] = None,
    ) -> KGroupedStream: ...
    def join(
        self,
        other: Union[KStream, KTable, GlobalKTable],
        joiner: Callable[[Value, Any], Any],
        windows: Optional[JoinWindows] = None,
        key_selector: Optional[Callable[[Key, Value], Any]] = None,
    ) -> KStream:
        """Two streams need `windows`; a global table needs `key_selector`."""
    def left_join(
        self,
        other: Union[KStream, KTable, GlobalKTable],
        joiner: Callable[[Value, Optional[Any]], Any],
        windows: Optional[JoinWindows] = None,
        key_selector: Optional[Callable[[Key, Value], Any]] = None,
    ) -> KStream: ...
    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Optional[Value], Optional[Any]], Any],
        windows: JoinWindows,
    ) -> KStream: ...

class KGroupedStream:
    def count(self, store: Optional[str] = None) -> KTable: ...
    def reduce(
        self,
        reducer: Callable[[Value, Value], Value],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...
    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Key, Value, Any], Any],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...
    def windowed_by(
        self, windows: Union[TimeWindows, SlidingWindows, SessionWindows]
    ) -> Union[TimeWindowedKStream, SessionWindowedKStream]: ...

class TimeWindows:
    def __init__(
        self,
        size_ms: int,
        grace_ms: int = 0,
        advance_ms: Optional[int] = None,
        emit_final: bool = False,
    ) -> None: ...

class SlidingWindows:
    def __init__(self, time_difference_ms: int, grace_ms: int = 0, emit_final: bool = False) -> None: ...

class SessionWindows:
    def __init__(self, inactivity_gap_ms: int, grace_ms: int = 0, emit_final: bool = False) -> None: ...

class JoinWindows:
    def __init__(self, time_difference_ms: int, grace_ms: int = 0) -> None: ...

class TimeWindowedKStream:
    """Tables of windowed aggregations are keyed by `(key, start_ms, end_ms)`."""

    def count(self, store: Optional[str] = None) -> KTable: ...
    def reduce(
        self,
        reducer: Callable[[Value, Value], Value],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...
    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Key, Value, Any], Any],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...

class SessionWindowedKStream:
    """Tables of session aggregations are keyed by `(key, start_ms, end_ms)`."""

    def count(self, store: Optional[str] = None) -> KTable: ...
    def reduce(
        self,
        reducer: Callable[[Value, Value], Value],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...
    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Key, Value, Any], Any],
        merger: Callable[[Key, Any, Any], Any],
        store: Optional[str] = None,
        value_serde: Optional[Serde] = None,
    ) -> KTable: ...

class BranchedKStream:
    def branch(
        self, predicate: Callable[[Key, Value], bool], name: Optional[str] = None
    ) -> BranchedKStream: ...
    def default_branch(self, name: Optional[str] = None) -> dict[str, KStream]: ...
    def no_default_branch(self) -> dict[str, KStream]: ...

class KTable:
    def to_stream(self) -> KStream: ...
    def join(self, other: KTable, joiner: Callable[[Value, Any], Any]) -> KTable: ...
    def left_join(self, other: KTable, joiner: Callable[[Value, Optional[Any]], Any]) -> KTable: ...
    def outer_join(
        self, other: KTable, joiner: Callable[[Optional[Value], Optional[Any]], Any]
    ) -> KTable: ...
    def join_on_foreign_key(
        self,
        other: KTable,
        foreign_key: Callable[[Value], Any],
        joiner: Callable[[Value, Any], Any],
    ) -> KTable:
        """Rows whose `foreign_key(value)` is a key of `other`, joined."""
    def left_join_on_foreign_key(
        self,
        other: KTable,
        foreign_key: Callable[[Value], Any],
        joiner: Callable[[Value, Optional[Any]], Any],
    ) -> KTable:
        """Every row, joined with `other`'s row for its foreign key or `None`."""

class GlobalKTable: ...

class KafkaStreams:
    """One instance of an application (a member of its consumer group)."""

    def __init__(self, topology: Topology, config: Mapping[str, Any]) -> None:
        """`config`: Weir's settings (`application_id`, `bootstrap_servers`,
        `processing_guarantee`, `num_stream_threads`, `state_dir`,
        `commit_interval_ms`, `processing_handler`, `http_bind`, `kafka.*` …)."""
    def start(self) -> None: ...
    def close(self, timeout: float = 30.0) -> bool: ...
    @property
    def state(self) -> str:
        """`CREATED`, `REBALANCING`, `RUNNING`, `PENDING_SHUTDOWN`,
        `NOT_RUNNING`, `PENDING_ERROR` or `ERROR`."""
    def wait_for_state(self, state: str, timeout: float = 60.0) -> str: ...
    @property
    def error(self) -> Optional[str]: ...
    @property
    def http_address(self) -> Optional[str]: ...
    def metrics(self) -> str:
        """Prometheus text format, as `GET /metrics` serves it."""
    def __enter__(self) -> KafkaStreams: ...
    def __exit__(self, *args: Any) -> bool: ...

class TopologyTestDriver:
    """Runs a topology in memory, without a broker."""

    def __init__(
        self,
        topology: Topology,
        application_id: str = "test",
        processing_handler: str = "log_and_fail",
        deserialization_handler: str = "log_and_fail",
        cache_max_bytes: int = 0,
        initial_wall_clock_ms: int = 0,
    ) -> None: ...
    def create_input_topic(
        self, topic: str, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None
    ) -> TestInputTopic: ...
    def create_output_topic(
        self, topic: str, key_serde: Optional[Serde] = None, value_serde: Optional[Serde] = None
    ) -> TestOutputTopic: ...
    def advance_wall_clock_time(self, ms: int) -> None: ...
    def written_topics(self) -> list[str]: ...
    def close(self) -> None: ...
    def __enter__(self) -> TopologyTestDriver: ...
    def __exit__(self, *args: Any) -> bool: ...

class TestInputTopic:
    def pipe_input(
        self,
        key: Any,
        value: Any,
        timestamp: Optional[int] = None,
        headers: Optional[Sequence[Tuple[str, Optional[bytes]]]] = None,
    ) -> None: ...
    def pipe_key_value_list(self, records: list[Tuple[Any, ...]]) -> None: ...

class TestOutputTopic:
    def read_key_values_to_list(self) -> list[Tuple[Any, Any]]: ...
    def read_key_values_to_map(self) -> dict[Any, Any]: ...
    def read_records_to_list(
        self,
    ) -> list[Tuple[Any, Any, int, list[Tuple[str, Optional[bytes]]]]]:
        """`(key, value, timestamp, headers)` of each unread record."""

class Broker:
    """The Kafka broker of the tests (`KAFKA_BOOTSTRAP_SERVERS`)."""

    def __init__(self) -> None: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @staticmethod
    def unique_name(prefix: str) -> str: ...
    def create_topics(self, topics: Sequence[Tuple[str, int]]) -> None: ...
    def produce(self, topic: str, records: Sequence[Tuple[Optional[bytes], bytes]]) -> int: ...
    def read_committed(
        self, topic: str
    ) -> list[Tuple[Optional[bytes], Optional[bytes], int, int]]: ...

def init_logging() -> None:
    """Weir's logs to stderr (`WEIR_LOG` filter, `WEIR_LOG_FORMAT=json`)."""
