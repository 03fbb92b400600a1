//! The DSL from Python: `StreamsBuilder`, `KStream`, `KGroupedStream`,
//! `TimeWindowedKStream`, `KTable`, `TimeWindows` and `Topology`, over
//! Weir's typed DSL with Python objects as keys and values.
//!
//! Every Python stream carries the serdes of its keys and values: those of
//! its source, kept by the operations that keep the data (`filter`,
//! `peek` …) and replaced by the builder's defaults (JSON unless given) by
//! those that change it (`map_values` …). `to()`, `group_by_key()` and the
//! others take explicit serdes too.

use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use weir::topology::{self, Consumed, Grouped, Materialized, Produced};
use weir::windows::{EmitStrategy, Windowed};

use crate::ops::{BranchProcessor, JoinPair, JoinProcessor, Op, PyProcessor};
use crate::serde::Serde;
use crate::value::{Callable, PyObj};

type Stream = topology::KStream<PyObj, PyObj>;

fn serde_arg(s: Option<&Bound<'_, Serde>>) -> Option<Serde> {
    s.map(|s| s.get().clone())
}

fn to_py_int(n: Option<i64>) -> PyObj {
    Python::attach(|py| match n {
        Some(n) => PyObj::new(n.into_pyobject(py).expect("int").into_any().unbind()),
        None => PyObj::none(py),
    })
}

fn materialized<V: 'static>(store: Option<String>, key: &Serde) -> Materialized<PyObj, V> {
    let m = match store {
        Some(name) => Materialized::as_(name),
        None => Materialized::new(),
    };
    m.with_key_serde(key.clone())
}

/// Builds a topology: sources, operations, sinks.
#[pyclass(unsendable, module = "weir", name = "StreamsBuilder")]
pub struct StreamsBuilder {
    inner: topology::StreamsBuilder,
    defaults: Defaults,
}

/// The serdes of data whose serde was not given: the builder's defaults.
#[derive(Clone)]
struct Defaults {
    key: Serde,
    value: Serde,
}

#[pymethods]
impl StreamsBuilder {
    /// `default_key_serde` / `default_value_serde`: the serdes of keys and
    /// values whose serde is not given (Kafka Streams' `default.key.serde`);
    /// JSON unless set.
    #[new]
    #[pyo3(signature = (default_key_serde = None, default_value_serde = None))]
    fn new(
        py: Python<'_>,
        default_key_serde: Option<&Bound<'_, Serde>>,
        default_value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<Self> {
        let json = Serde::json_serde(py)?;
        Ok(StreamsBuilder {
            inner: topology::StreamsBuilder::new(),
            defaults: Defaults {
                key: serde_arg(default_key_serde).unwrap_or_else(|| json.clone()),
                value: serde_arg(default_value_serde).unwrap_or(json),
            },
        })
    }

    /// A stream of the records of `topic`.
    #[pyo3(signature = (topic, key_serde = None, value_serde = None))]
    fn stream(
        &self,
        topic: &str,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> KStream {
        let key = serde_arg(key_serde).unwrap_or_else(|| self.defaults.key.clone());
        let value = serde_arg(value_serde).unwrap_or_else(|| self.defaults.value.clone());
        let inner = self
            .inner
            .stream(topic, Consumed::with(key.clone(), value.clone()));
        KStream {
            inner,
            key,
            value,
            defaults: self.defaults.clone(),
        }
    }

    /// A table of the latest value per key of `topic` (a `None` value
    /// deletes), materialized in a store (named `store`, or generated).
    #[pyo3(signature = (topic, key_serde = None, value_serde = None, store = None))]
    fn table(
        &self,
        topic: &str,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
        store: Option<String>,
    ) -> KTable {
        let key = serde_arg(key_serde).unwrap_or_else(|| self.defaults.key.clone());
        let value = serde_arg(value_serde).unwrap_or_else(|| self.defaults.value.clone());
        let m = materialized(store, &key).with_value_serde(value.clone());
        let inner = self
            .inner
            .table(topic, Consumed::with(key.clone(), value.clone()), m);
        KTable {
            inner: Table::Values(inner),
            key,
            value,
            defaults: self.defaults.clone(),
        }
    }

    /// The topology built so far.
    fn build(&self) -> PyResult<Topology> {
        let topology = self
            .inner
            .build()
            .map_err(|e| PyValueError::new_err(format!("the topology is not valid: {e}")))?;
        Ok(Topology {
            inner: std::sync::Mutex::new(Some(topology)),
        })
    }
}

/// A built topology, run by `KafkaStreams` or `TopologyTestDriver` (once).
#[pyclass(module = "weir", name = "Topology")]
pub struct Topology {
    inner: std::sync::Mutex<Option<topology::Topology>>,
}

impl Topology {
    pub fn take(&self) -> PyResult<topology::Topology> {
        self.inner
            .lock()
            .expect("topology lock")
            .take()
            .ok_or_else(|| {
                PyRuntimeError::new_err(
                    "this topology already runs: build another with StreamsBuilder.build()",
                )
            })
    }
}

#[pymethods]
impl Topology {
    /// Sub-topologies, sources, processors, stores and sinks, as Kafka
    /// Streams' `Topology.describe()` prints them.
    fn describe(&self) -> PyResult<String> {
        let guard = self.inner.lock().expect("topology lock");
        let t = guard
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("this topology already runs"))?;
        Ok(t.describe().to_string())
    }
}

/// A stream of records.
#[pyclass(unsendable, module = "weir", name = "KStream")]
pub struct KStream {
    inner: Stream,
    key: Serde,
    value: Serde,
    defaults: Defaults,
}

impl KStream {
    fn with(&self, inner: Stream, key: Option<Serde>, value: Option<Serde>) -> KStream {
        KStream {
            inner,
            key: key.unwrap_or_else(|| self.defaults.key.clone()),
            value: value.unwrap_or_else(|| self.defaults.value.clone()),
            defaults: self.defaults.clone(),
        }
    }

    fn keyed(&self, op: Op, f: Bound<'_, PyAny>, value: Option<Serde>) -> PyResult<KStream> {
        let f = Callable::new(f)?;
        let inner = self
            .inner
            .process_values(move || PyProcessor::new(op, vec![f.clone()]), &[]);
        Ok(self.with(inner, Some(self.key.clone()), value))
    }

    fn rekeyed(&self, op: Op, f: Bound<'_, PyAny>, value: Option<Serde>) -> PyResult<KStream> {
        let f = Callable::new(f)?;
        let inner = self
            .inner
            .process(move || PyProcessor::new(op, vec![f.clone()]), &[]);
        Ok(self.with(inner, None, value))
    }

    fn serdes(
        &self,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> (Serde, Serde) {
        (
            serde_arg(key_serde).unwrap_or_else(|| self.key.clone()),
            serde_arg(value_serde).unwrap_or_else(|| self.value.clone()),
        )
    }

    fn join_with(
        &self,
        table: &KTable,
        joiner: Bound<'_, PyAny>,
        left: bool,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KStream> {
        if matches!(table.inner, Table::WindowedCount(_)) {
            return Err(PyValueError::new_err(
                "a stream joins a table by key; a windowed table's keys are windows",
            ));
        }
        let joiner = Callable::new(joiner)?;
        let (key, value) = self.serdes(None, value_serde);
        let joined = topology::Joined::new()
            .with_key_serde(key)
            .with_value_serde(value);
        let table = table.values();
        let pairs: topology::KStream<PyObj, JoinPair> = if left {
            self.inner.left_join_table(
                &table,
                |v: &PyObj, row: Option<&PyObj>| (v.clone(), row.cloned()),
                joined,
            )
        } else {
            self.inner.join_table(
                &table,
                |v: &PyObj, row: &PyObj| (v.clone(), Some(row.clone())),
                joined,
            )
        };
        let inner = pairs.process_values(move || JoinProcessor::new(joiner.clone()), &[]);
        Ok(self.with(inner, Some(self.key.clone()), None))
    }
}

#[pymethods]
impl KStream {
    /// Keeps the records for which `predicate(key, value)` is true.
    fn filter(&self, predicate: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.keyed(Op::Filter, predicate, Some(self.value.clone()))
    }

    /// Drops the records for which `predicate(key, value)` is true.
    fn filter_not(&self, predicate: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.keyed(Op::FilterNot, predicate, Some(self.value.clone()))
    }

    /// Replaces each value with `mapper(value)`; the key stays.
    fn map_values(&self, mapper: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.keyed(Op::MapValues, mapper, None)
    }

    /// Replaces each record with one per item of `mapper(value)`, with the
    /// same key.
    fn flat_map_values(&self, mapper: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.keyed(Op::FlatMapValues, mapper, None)
    }

    /// Calls `action(key, value)` for each record and passes it on.
    fn peek(&self, action: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.keyed(Op::Peek, action, Some(self.value.clone()))
    }

    /// Calls `action(key, value)` for each record (a terminal operation).
    fn foreach(&self, action: Bound<'_, PyAny>) -> PyResult<()> {
        self.keyed(Op::Peek, action, None).map(drop)
    }

    /// Replaces each record with `mapper(key, value)`, a `(key, value)`
    /// tuple (a later aggregation repartitions by the new key).
    fn map(&self, mapper: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.rekeyed(Op::Map, mapper, None)
    }

    /// Replaces each record with the `(key, value)` tuples of
    /// `mapper(key, value)`.
    fn flat_map(&self, mapper: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.rekeyed(Op::FlatMap, mapper, None)
    }

    /// Sets each record's key to `selector(key, value)`.
    fn select_key(&self, selector: Bound<'_, PyAny>) -> PyResult<KStream> {
        self.rekeyed(Op::SelectKey, selector, Some(self.value.clone()))
    }

    /// One stream per predicate `p(key, value)`: a record goes to the first
    /// whose predicate is true, and is dropped when none is.
    #[pyo3(signature = (*predicates))]
    fn branch(&self, predicates: Bound<'_, PyTuple>) -> PyResult<Vec<KStream>> {
        let predicates = predicates
            .iter()
            .map(Callable::new)
            .collect::<PyResult<Vec<_>>>()?;
        if predicates.is_empty() {
            return Err(PyValueError::new_err(
                "branch() needs at least one predicate",
            ));
        }
        let n = predicates.len();
        let tagged = self
            .inner
            .process_values(move || BranchProcessor::new(predicates.clone()), &[]);
        Ok((0..n)
            .map(|i| {
                let inner = tagged
                    .filter(move |_, (tag, _)| *tag == i)
                    .map_values(|(_, value)| value);
                self.with(inner, Some(self.key.clone()), Some(self.value.clone()))
            })
            .collect())
    }

    /// The records of this stream and `other`, interleaved.
    fn merge(&self, other: &KStream) -> KStream {
        let same = |a: &Serde, b: &Serde| a.same(b).then(|| a.clone());
        self.with(
            self.inner.merge(&other.inner),
            same(&self.key, &other.key),
            same(&self.value, &other.value),
        )
    }

    /// Writes every record to `topic`.
    #[pyo3(signature = (topic, key_serde = None, value_serde = None))]
    fn to(
        &self,
        topic: &str,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<()> {
        let (key, value) = self.serdes(key_serde, value_serde);
        self.inner.to(topic, Produced::with(key, value));
        Ok(())
    }

    /// Groups by the current key, for an aggregation.
    #[pyo3(signature = (key_serde = None, value_serde = None))]
    fn group_by_key(
        &self,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KGroupedStream> {
        let (key, value) = self.serdes(key_serde, value_serde);
        Ok(KGroupedStream {
            inner: self
                .inner
                .group_by_key(Grouped::with(key.clone(), value.clone())),
            key,
            defaults: self.defaults.clone(),
        })
    }

    /// Groups by `selector(key, value)` (through a repartition topic).
    #[pyo3(signature = (selector, key_serde = None, value_serde = None))]
    fn group_by(
        &self,
        selector: Bound<'_, PyAny>,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KGroupedStream> {
        let mut rekeyed = self.select_key(selector)?;
        if let Some(k) = key_serde {
            rekeyed.key = k.get().clone();
        }
        rekeyed.group_by_key(None, value_serde)
    }

    /// Inner join with `table`: each record whose key has a row becomes
    /// `joiner(value, row)`.
    #[pyo3(signature = (table, joiner, value_serde = None))]
    fn join(
        &self,
        table: &KTable,
        joiner: Bound<'_, PyAny>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KStream> {
        self.join_with(table, joiner, false, value_serde)
    }

    /// Left join with `table`: every record becomes `joiner(value, row)`,
    /// `row` being `None` when the key has none.
    #[pyo3(signature = (table, joiner, value_serde = None))]
    fn left_join(
        &self,
        table: &KTable,
        joiner: Bound<'_, PyAny>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KStream> {
        self.join_with(table, joiner, true, value_serde)
    }
}

/// A stream grouped by key, for an aggregation.
#[pyclass(unsendable, module = "weir", name = "KGroupedStream")]
pub struct KGroupedStream {
    inner: topology::KGroupedStream<PyObj, PyObj>,
    key: Serde,
    defaults: Defaults,
}

#[pymethods]
impl KGroupedStream {
    /// Counts the records per key, in a RocksDB store with a changelog
    /// (named `store`, or generated).
    #[pyo3(signature = (store = None))]
    fn count(&self, store: Option<String>) -> KTable {
        KTable {
            inner: Table::Count(self.inner.count(materialized(store, &self.key))),
            key: self.key.clone(),
            value: Serde::int_serde(),
            defaults: self.defaults.clone(),
        }
    }

    /// Windows the grouped stream (tumbling or hopping windows).
    fn windowed_by(&self, windows: &TimeWindows) -> TimeWindowedKStream {
        TimeWindowedKStream {
            grouped: self.inner.clone(),
            windows: windows.inner,
            emit: windows.emit,
            key: self.key.clone(),
            defaults: self.defaults.clone(),
        }
    }
}

/// Tumbling or hopping time windows.
#[pyclass(frozen, module = "weir", name = "TimeWindows")]
pub struct TimeWindows {
    inner: weir::windows::TimeWindows,
    emit: EmitStrategy,
}

#[pymethods]
impl TimeWindows {
    /// Windows of `size_ms` that accept records up to `grace_ms` after
    /// their end; `advance_ms` (default: the size) makes them hop; with
    /// `emit_final` a window's result is emitted once, when it closes.
    #[new]
    #[pyo3(signature = (size_ms, grace_ms = 0, advance_ms = None, emit_final = false))]
    fn new(
        size_ms: u64,
        grace_ms: u64,
        advance_ms: Option<u64>,
        emit_final: bool,
    ) -> PyResult<Self> {
        let invalid = |e: weir::windows::WindowError| PyValueError::new_err(e.to_string());
        let mut inner = weir::windows::TimeWindows::of_size_with_grace(
            Duration::from_millis(size_ms),
            Duration::from_millis(grace_ms),
        )
        .map_err(invalid)?;
        if let Some(advance) = advance_ms {
            inner = inner
                .advance_by(Duration::from_millis(advance))
                .map_err(invalid)?;
        }
        Ok(TimeWindows {
            inner,
            emit: if emit_final {
                EmitStrategy::OnWindowClose
            } else {
                EmitStrategy::OnEveryUpdate
            },
        })
    }
}

/// A grouped stream windowed by time.
#[pyclass(unsendable, module = "weir", name = "TimeWindowedKStream")]
pub struct TimeWindowedKStream {
    grouped: topology::KGroupedStream<PyObj, PyObj>,
    windows: weir::windows::TimeWindows,
    emit: EmitStrategy,
    key: Serde,
    defaults: Defaults,
}

#[pymethods]
impl TimeWindowedKStream {
    /// Counts the records per key and window; the table's keys are
    /// `(key, start_ms, end_ms)` tuples.
    #[pyo3(signature = (store = None))]
    fn count(&self, store: Option<String>) -> KTable {
        let windowed = self.grouped.windowed_by(self.windows).emit(self.emit);
        let size = self.windows.size_ms();
        KTable {
            inner: Table::WindowedCount(windowed.count(materialized(store, &self.key))),
            key: Serde::windowed_serde(&self.key, size),
            value: Serde::int_serde(),
            defaults: self.defaults.clone(),
        }
    }
}

enum Table {
    Values(topology::KTable<PyObj, PyObj>),
    Count(topology::KTable<PyObj, i64>),
    WindowedCount(topology::KTable<Windowed<PyObj>, i64>),
}

/// A changelog stream: the latest value per key.
#[pyclass(unsendable, module = "weir", name = "KTable")]
pub struct KTable {
    inner: Table,
    key: Serde,
    value: Serde,
    defaults: Defaults,
}

impl KTable {
    /// The table with Python values (a join reads it).
    fn values(&self) -> topology::KTable<PyObj, PyObj> {
        match &self.inner {
            Table::Values(t) => t.clone(),
            Table::Count(t) => t.map_values(|n| to_py_int(Some(n))),
            Table::WindowedCount(_) => {
                unreachable!("windowed tables are refused before a join")
            }
        }
    }
}

#[pymethods]
impl KTable {
    /// The stream of the table's updates (`None` values for deletions).
    fn to_stream(&self) -> KStream {
        let inner: Stream = match &self.inner {
            Table::Values(t) => t
                .to_stream()
                .map_values(|v: Option<PyObj>| v.unwrap_or_else(|| Python::attach(PyObj::none))),
            Table::Count(t) => t.to_stream().map_values(to_py_int),
            Table::WindowedCount(t) => t.to_stream().map(|w: Windowed<PyObj>, n: Option<i64>| {
                let key = Python::attach(|py| {
                    let tuple = PyTuple::new(
                        py,
                        [
                            w.key.bind(py).clone(),
                            w.window.start_ms.into_pyobject(py).expect("int").into_any(),
                            w.window.end_ms.into_pyobject(py).expect("int").into_any(),
                        ],
                    )
                    .expect("tuple");
                    PyObj::from_bound(tuple.into_any())
                });
                (key, to_py_int(n))
            }),
        };
        KStream {
            inner,
            key: self.key.clone(),
            value: self.value.clone(),
            defaults: self.defaults.clone(),
        }
    }
}
