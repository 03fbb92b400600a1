//! Windowed grouped streams: [`TimeWindowedKStream`] and
//! [`SessionWindowedKStream`], from [`KGroupedStream::windowed_by`] and
//! [`KGroupedStream::windowed_by_session`].
//!
//! `count`, `reduce` and `aggregate` add one aggregation node with a logged
//! window (or session) store, plus a logged `<store>-trigger` key-value store
//! unless results are emitted on every update; the result is a
//! [`KTable<Windowed<K>, A>`] whose key serde is a [`WindowedSerde`]. The
//! semantics (lateness, triggers, retention) are described in
//! [`crate::windows`]; configuration errors (retention shorter than size +
//! grace, an early trigger without condition) surface from
//! [`super::StreamsBuilder::build`] as [`super::TopologyError::Window`].
//!
//! ```
//! use std::time::Duration;
//! use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
//! use weir::serdes::{I64Serde, StringSerde};
//! use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
//! use weir::windows::{EmitStrategy, TimeWindows, Windowed, WindowedSerde};
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<String, String>("clicks", Consumed::new())
//!     .group_by_key(Grouped::new())
//!     .windowed_by(TimeWindows::of_size_with_grace(Duration::from_millis(10), Duration::ZERO).unwrap())
//!     .emit(EmitStrategy::OnWindowClose)
//!     .count(Materialized::as_("clicks-per-10ms"))
//!     .to_stream()
//!     .to("counts", Produced::new());
//! let mut driver = TopologyTestDriver::new(builder.build().unwrap(), DriverConfig::new("app")).unwrap();
//! let input = TestInputTopic::new("clicks", StringSerde, StringSerde);
//! for ts in [1, 4, 12] {
//!     driver.pipe(&input, "u".to_string(), "click".to_string(), ts).unwrap();
//! }
//! let output = TestOutputTopic::new("counts", WindowedSerde::time(StringSerde, 10), I64Serde);
//! // Stream time 12 closed [0, 10): its one final result.
//! assert_eq!(driver.read_key_values(&output).unwrap(), vec![(Windowed::new("u".to_string(), 0, 10), 2)]);
//! ```

use std::sync::Arc;

use crate::processor::ProcessorError;
use crate::processor::aggregate::{StepFailed, try_aggregate_fn, try_reduce_fn};
use crate::processor::node::{CachingNode, ErasedNode};
use crate::processor::{Change, ProcessorNode, StoreKind, StoreSerdes};
use crate::serdes::{BytesSerde, SharedSerde};
use crate::windows::serde::ListSerde;
use crate::windows::session::SessionWindowAggregate;
use crate::windows::sliding::SlidingWindowAggregate;
use crate::windows::time::{LateSink, Spec, TimeWindowAggregate};
use crate::windows::{
    self, EmitStrategy, SessionWindows, SlidingWindows, TimeWindows, WindowError, Windowed,
    WindowedSerde,
};

use super::{Data, KGroupedStream, KTable, Materialized, StoreDef, TopologyError};

/// Options shared by both windowed streams.
struct Options {
    emit: EmitStrategy,
    late_topic: Option<String>,
}

/// A grouped stream windowed by [`TimeWindows`] or [`SlidingWindows`]
/// (Kafka Streams' `TimeWindowedKStream`).
pub struct TimeWindowedKStream<K, V> {
    grouped: KGroupedStream<K, V>,
    windows: TimeKind,
    options: Options,
}

#[derive(Clone, Copy)]
enum TimeKind {
    Fixed(TimeWindows),
    Sliding(SlidingWindows),
}

/// A grouped stream windowed by [`SessionWindows`] (Kafka Streams' `SessionWindowedKStream`).
pub struct SessionWindowedKStream<K, V> {
    grouped: KGroupedStream<K, V>,
    windows: SessionWindows,
    options: Options,
}

/// What differs between the time and session variants when building.
struct Kind<K> {
    store_kind: StoreKind,
    needed_ms: i64,
    key_serde: Box<dyn FnOnce(SharedSerde<K>) -> SharedSerde<Windowed<K>>>,
    /// Retention of a record buffer (sliding windows only).
    buffer_retention_ms: Option<i64>,
}

fn build<K: Data, V: Data, A: Data>(
    grouped: &KGroupedStream<K, V>,
    options: &Options,
    materialized: Materialized<K, A>,
    kind: Kind<K>,
    make: impl Fn(Arc<Spec<K, V>>) -> Box<dyn ErasedNode> + Send + Sync + 'static,
) -> KTable<Windowed<K>, A> {
    let builder = grouped.stream.builder.clone();
    let mut b = builder.borrow_mut();
    let store_name = b.name_or(materialized.store_name, "KSTREAM-AGGREGATE-STATE-STORE-");
    let key = b.serde(
        materialized.key_serde,
        grouped.key_serde.clone(),
        &store_name,
        "key",
    );
    let value = b.serde(materialized.value_serde, None, &store_name, "value");
    let window_error = |source: WindowError| TopologyError::Window {
        store: store_name.clone(),
        source,
    };
    let retention_ms = match windows::retention(materialized.retention_ms, kind.needed_ms) {
        Ok(r) => r,
        Err(e) => {
            b.error(window_error(e));
            kind.needed_ms
        }
    };
    if let EmitStrategy::Early {
        every_updates: 0,
        every_wall_clock_ms,
    } = options.emit
        && every_wall_clock_ms <= 0
    {
        b.error(window_error(WindowError::EmptyEarlyTrigger));
    }
    let parent = grouped.aggregation_parent(&mut b, &store_name, &key);
    let name = b.name_or(grouped.stream.name.clone(), "KSTREAM-WINDOWED-AGGREGATE-");
    let store = b.add_store_def(
        StoreDef::timed(
            store_name.clone(),
            kind.store_kind,
            retention_ms,
            StoreSerdes::new(key.clone(), value.clone()),
        )
        .logged(materialized.logging),
    );
    let trigger_store = (options.emit != EmitStrategy::OnEveryUpdate).then(|| {
        let name = format!("{store_name}-trigger");
        let bytes: SharedSerde<Vec<u8>> = Arc::new(BytesSerde);
        let index = b.add_store(
            name.clone(),
            materialized.logging,
            StoreSerdes::new(bytes.clone(), bytes),
        );
        (name, index)
    });
    let buffer_store = kind.buffer_retention_ms.map(|retention_ms| {
        let buffer_name = format!("{store_name}-records");
        let values = b.serde(grouped.value_serde.clone(), None, &buffer_name, "value");
        let list: SharedSerde<Vec<V>> = Arc::new(ListSerde(values));
        let index = b.add_store_def(
            StoreDef::timed(
                buffer_name.clone(),
                StoreKind::Window,
                retention_ms,
                StoreSerdes::new(key.clone(), list),
            )
            .logged(materialized.logging),
        );
        (buffer_name, index)
    });
    b.late_topics.extend(options.late_topic.iter().cloned());
    let late = options.late_topic.clone().map(|topic| LateSink {
        value_serde: b.serde(grouped.value_serde.clone(), None, &name, "value"),
        key_serde: key.clone(),
        topic,
    });
    let spec = Arc::new(Spec {
        store: store_name,
        trigger_store: trigger_store.as_ref().map(|(n, _)| n.clone()),
        emit: options.emit,
        key_serde: key.clone(),
        late,
        buffer_store: buffer_store.as_ref().map(|(n, _)| n.clone()),
    });
    let node = b.add_processor(name, &[parent], move || make(spec.clone()));
    b.connect_store(node, store);
    for (_, index) in trigger_store.into_iter().chain(buffer_store) {
        b.connect_store(node, index);
    }
    drop(b);
    KTable::new(
        builder,
        node,
        Some((kind.key_serde)(key)),
        Some(value),
        None,
    )
}

macro_rules! options {
    () => {
        /// Sets when results are emitted (default: on every update).
        pub fn emit(mut self, strategy: EmitStrategy) -> Self {
            self.options.emit = strategy;
            self
        }

        /// Writes late records (dropped because their windows closed) to
        /// `topic`: the input record's key and value bytes as read (as a
        /// dead-letter topic gets them), with headers saying why
        /// ([`crate::windows::LATE_HEADER_REASON`] and the others). They are
        /// counted either way. The runtime creates `topic` at start-up when
        /// it does not exist.
        pub fn late_records_to(mut self, topic: impl Into<String>) -> Self {
            self.options.late_topic = Some(topic.into());
            self
        }
    };
}

impl<K: Data, V: Data> TimeWindowedKStream<K, V> {
    pub(crate) fn new(grouped: KGroupedStream<K, V>, windows: TimeWindows) -> Self {
        Self::of_kind(grouped, TimeKind::Fixed(windows))
    }

    pub(crate) fn sliding(grouped: KGroupedStream<K, V>, windows: SlidingWindows) -> Self {
        Self::of_kind(grouped, TimeKind::Sliding(windows))
    }

    fn of_kind(grouped: KGroupedStream<K, V>, windows: TimeKind) -> Self {
        TimeWindowedKStream {
            grouped,
            windows,
            options: Options {
                emit: EmitStrategy::OnEveryUpdate,
                late_topic: None,
            },
        }
    }

    options!();

    /// Counts the records per key and window.
    pub fn count(self, materialized: Materialized<K, i64>) -> KTable<Windowed<K>, i64>
    where
        K: Send,
    {
        self.aggregate_with(materialized, |_, _, old: Option<i64>| {
            Ok(old.unwrap_or(0) + 1)
        })
    }

    /// Combines the values per key and window with `reducer(aggregate, value)`.
    pub fn reduce(
        self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V>
    where
        K: Send,
        V: Send,
    {
        self.aggregate_with(materialized, move |_, value, old| {
            Ok(match old {
                Some(agg) => reducer(agg, value),
                None => value,
            })
        })
    }

    /// [`reduce`](Self::reduce) with a reducer that may fail:
    /// `reducer(&aggregate, value)`. A failure is a processing error of the
    /// record; no window's aggregate changes.
    pub fn try_reduce(
        self,
        reducer: impl Fn(&V, V) -> Result<V, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V>
    where
        K: Send,
        V: Send,
    {
        self.aggregate_with(materialized, try_reduce_fn(reducer))
    }

    /// [`aggregate`](Self::aggregate) with an initializer and aggregator
    /// that may fail: `aggregator(key, value, &aggregate)`. A failure is a
    /// processing error of the record; the window it failed in keeps its
    /// aggregate (with hopping windows, the windows before it in the
    /// record's order stay updated; with sliding windows none is).
    pub fn try_aggregate<A: Data + Send>(
        self,
        initializer: impl Fn() -> Result<A, ProcessorError> + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, &A) -> Result<A, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<Windowed<K>, A>
    where
        K: Send,
    {
        self.aggregate_with(materialized, try_aggregate_fn(initializer, aggregator))
    }

    /// Folds the values per key and window with `aggregator(key, value,
    /// aggregate)`, starting each window from `initializer()`.
    pub fn aggregate<A: Data + Send>(
        self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<Windowed<K>, A>
    where
        K: Send,
    {
        self.aggregate_with(materialized, move |key, value, old| {
            Ok(aggregator(key, value, old.unwrap_or_else(&initializer)))
        })
    }

    fn aggregate_with<A: Data + Send>(
        self,
        materialized: Materialized<K, A>,
        f: impl Fn(&K, V, Option<A>) -> Result<A, StepFailed<A>> + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, A>
    where
        K: Send,
    {
        let f: windows::time::AggregateFn<K, V, A> = Arc::new(f);
        let store_kind = StoreKind::Window;
        match self.windows {
            TimeKind::Fixed(windows) => {
                let kind = Kind {
                    store_kind,
                    needed_ms: windows.size_ms().saturating_add(windows.grace_ms()),
                    key_serde: Box::new(move |inner| {
                        Arc::new(WindowedSerde::time_shared(inner, windows.size_ms()))
                    }),
                    buffer_retention_ms: None,
                };
                build(
                    &self.grouped,
                    &self.options,
                    materialized,
                    kind,
                    move |spec| {
                        CachingNode::<_, K, V, Windowed<K>, Change<A>>::boxed(TimeWindowAggregate {
                            windows,
                            spec,
                            f: f.clone(),
                            cache: Default::default(),
                        })
                    },
                )
            }
            TimeKind::Sliding(windows) => {
                let (diff, grace) = (windows.time_difference_ms(), windows.grace_ms());
                let kind = Kind {
                    store_kind,
                    needed_ms: diff.saturating_add(grace).saturating_add(1),
                    key_serde: Box::new(move |inner| {
                        Arc::new(WindowedSerde::time_shared(inner, diff))
                    }),
                    buffer_retention_ms: Some(
                        diff.saturating_mul(2)
                            .saturating_add(grace)
                            .saturating_add(1),
                    ),
                };
                build(
                    &self.grouped,
                    &self.options,
                    materialized,
                    kind,
                    move |spec| {
                        ProcessorNode::<_, K, V, Windowed<K>, Change<A>>::boxed(
                            SlidingWindowAggregate {
                                windows,
                                spec,
                                f: f.clone(),
                            },
                        )
                    },
                )
            }
        }
    }
}

impl<K: Data, V: Data> SessionWindowedKStream<K, V> {
    pub(crate) fn new(grouped: KGroupedStream<K, V>, windows: SessionWindows) -> Self {
        SessionWindowedKStream {
            grouped,
            windows,
            options: Options {
                emit: EmitStrategy::OnEveryUpdate,
                late_topic: None,
            },
        }
    }

    options!();

    /// Counts the records per key and session.
    pub fn count(self, materialized: Materialized<K, i64>) -> KTable<Windowed<K>, i64> {
        self.aggregate_with(
            materialized,
            |_, _, old: Option<i64>| Ok(old.unwrap_or(0) + 1),
            |_, a, b| Ok(a + b),
        )
    }

    /// Combines the values per key and session with `reducer(aggregate,
    /// value)`; merging sessions combines their aggregates with it too.
    pub fn reduce(
        self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V> {
        let reducer = Arc::new(reducer);
        let merge = reducer.clone();
        self.aggregate_with(
            materialized,
            move |_, value, old| {
                Ok(match old {
                    Some(agg) => reducer(agg, value),
                    None => value,
                })
            },
            move |_, a, b| Ok(merge(a, b)),
        )
    }

    /// [`reduce`](Self::reduce) with a reducer that may fail:
    /// `reducer(&aggregate, value)`, also used to merge sessions. A failure
    /// is a processing error of the record; no session changes.
    pub fn try_reduce(
        self,
        reducer: impl Fn(&V, V) -> Result<V, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<Windowed<K>, V> {
        let reducer = Arc::new(reducer);
        let merge = reducer.clone();
        self.aggregate_with(
            materialized,
            move |_, value, old| match old {
                Some(agg) => reducer(&agg, value),
                None => Ok(value),
            },
            move |_, a, b| merge(&a, b),
        )
    }

    /// Folds the values per key and session with `aggregator(key, value,
    /// aggregate)` from `initializer()`; when a record bridges sessions their
    /// aggregates are combined with `merger(key, a, b)` first.
    pub fn aggregate<A: Data>(
        self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> A + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<Windowed<K>, A> {
        self.aggregate_with(
            materialized,
            move |key, value, old| Ok(aggregator(key, value, old.unwrap_or_else(&initializer))),
            move |key, a, b| Ok(merger(key, a, b)),
        )
    }

    /// [`aggregate`](Self::aggregate) with an initializer, aggregator and
    /// merger that may fail: `aggregator(key, value, &aggregate)`,
    /// `merger(key, &a, b)`. A failure is a processing error of the record;
    /// no session changes.
    pub fn try_aggregate<A: Data>(
        self,
        initializer: impl Fn() -> Result<A, ProcessorError> + Send + Sync + 'static,
        aggregator: impl Fn(&K, V, &A) -> Result<A, ProcessorError> + Send + Sync + 'static,
        merger: impl Fn(&K, &A, A) -> Result<A, ProcessorError> + Send + Sync + 'static,
        materialized: Materialized<K, A>,
    ) -> KTable<Windowed<K>, A> {
        self.aggregate_with(
            materialized,
            move |key, value, old| {
                let current = match old {
                    Some(a) => a,
                    None => initializer()?,
                };
                aggregator(key, value, &current)
            },
            move |key, a, b| merger(key, &a, b),
        )
    }

    fn aggregate_with<A: Data>(
        self,
        materialized: Materialized<K, A>,
        f: impl Fn(&K, V, Option<A>) -> Result<A, ProcessorError> + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> Result<A, ProcessorError> + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, A> {
        let f: windows::session::SessionAggregateFn<K, V, A> = Arc::new(f);
        let merger: windows::session::MergeFn<K, A> = Arc::new(merger);
        let windows = self.windows;
        let kind = Kind {
            store_kind: StoreKind::Session,
            needed_ms: windows.gap_ms().saturating_add(windows.grace_ms()),
            key_serde: Box::new(|inner| Arc::new(WindowedSerde::session_shared(inner))),
            buffer_retention_ms: None,
        };
        build(
            &self.grouped,
            &self.options,
            materialized,
            kind,
            move |spec| {
                ProcessorNode::<_, K, V, Windowed<K>, Change<A>>::boxed(SessionWindowAggregate {
                    windows,
                    spec,
                    f: f.clone(),
                    merger: merger.clone(),
                })
            },
        )
    }
}

impl<K: Data, V: Data> KGroupedStream<K, V> {
    /// Windows the grouped stream by time (tumbling or hopping windows) for
    /// a windowed aggregation; see [`crate::windows`].
    pub fn windowed_by(&self, windows: TimeWindows) -> TimeWindowedKStream<K, V> {
        TimeWindowedKStream::new(self.clone(), windows)
    }

    /// Windows the grouped stream by sliding windows; see [`crate::windows`].
    pub fn windowed_by_sliding(&self, windows: SlidingWindows) -> TimeWindowedKStream<K, V> {
        TimeWindowedKStream::sliding(self.clone(), windows)
    }

    /// Windows the grouped stream into sessions; see [`crate::windows`].
    pub fn windowed_by_session(&self, windows: SessionWindows) -> SessionWindowedKStream<K, V> {
        SessionWindowedKStream::new(self.clone(), windows)
    }
}
