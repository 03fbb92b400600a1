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

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use weir::topology::{self, Consumed, Grouped, Materialized, Produced};
use weir::windows::{EmitStrategy, Windowed};

/// Which rows of a join are emitted.
#[derive(Clone, Copy, PartialEq)]
enum JoinKind {
    Inner,
    Left,
    Outer,
}

use crate::ops::{
    self, BranchProcessor, GlobalKeyProcessor, JoinPair, JoinProcessor, Op, PyProcessor,
    TableJoinProcessor,
};
use crate::serde::Serde;
use crate::value::{Callable, PyObj};

type Stream = topology::KStream<PyObj, PyObj>;

fn serde_arg(s: Option<&Bound<'_, Serde>>) -> Option<Serde> {
    s.map(|s| s.get().clone())
}

fn to_py_int(n: Option<i64>) -> PyObj {
    crate::value::attach(|py| match n {
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
        default_key_serde: Option<&Bound<'_, Serde>>,
        default_value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<Self> {
        let json = Serde::json_serde();
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
        KStream::of(inner, Some(key), Some(value), &self.defaults)
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

    /// A global table of `topic`: every instance reads all its partitions
    /// into a store (named `store`, or generated), for joins by a selected key.
    #[pyo3(signature = (topic, key_serde = None, value_serde = None, store = None))]
    fn global_table(
        &self,
        topic: &str,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
        store: Option<String>,
    ) -> GlobalKTable {
        let key = serde_arg(key_serde).unwrap_or_else(|| self.defaults.key.clone());
        let value = serde_arg(value_serde).unwrap_or_else(|| self.defaults.value.clone());
        let m = materialized(store, &key).with_value_serde(value.clone());
        GlobalKTable {
            inner: self
                .inner
                .global_table(topic, Consumed::with(key, value), m),
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
    /// A topology that ships with Weir (`word-count`, `events-by-type`,
    /// `page-views`, `order-enrichment`, `datacenter-monitor`), built with
    /// `params` (its `topology.<name>` settings; defaults for the others).
    #[staticmethod]
    #[pyo3(signature = (name, params = None))]
    fn shipped(
        name: &str,
        params: Option<std::collections::BTreeMap<String, String>>,
    ) -> PyResult<Topology> {
        let shipped = weir::topologies::find(name).ok_or_else(|| {
            let names: Vec<&str> = weir::topologies::ALL.iter().map(|t| t.name).collect();
            PyValueError::new_err(format!(
                "no shipped topology '{name}'; there are {}",
                names.join(", ")
            ))
        })?;
        let params = shipped
            .params(&params.unwrap_or_default())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let topology = (shipped.build)(&params)
            .map_err(|e| PyValueError::new_err(format!("topology '{name}': {e}")))?;
        Ok(Topology {
            inner: std::sync::Mutex::new(Some(topology)),
        })
    }

    /// The shipped topologies: `{name: description}`.
    #[staticmethod]
    fn shipped_names() -> std::collections::BTreeMap<&'static str, &'static str> {
        weir::topologies::ALL
            .iter()
            .map(|t| (t.name, t.description))
            .collect()
    }

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
        KStream::of(inner, key, value, &self.defaults)
    }

    /// A Python stream of `inner`, whose serdes (the defaults where not
    /// known) are set on the Weir stream too, for the repartitions, join
    /// stores and sinks after it.
    fn of(inner: Stream, key: Option<Serde>, value: Option<Serde>, defaults: &Defaults) -> KStream {
        let key = key.unwrap_or_else(|| defaults.key.clone());
        let value = value.unwrap_or_else(|| defaults.value.clone());
        KStream {
            inner: inner.with_serdes(key.clone(), value.clone()),
            key,
            value,
            defaults: defaults.clone(),
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

    fn join_any(
        &self,
        other: &Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
        kind: JoinKind,
        windows: Option<&JoinWindows>,
        key_selector: Option<Bound<'_, PyAny>>,
    ) -> PyResult<KStream> {
        let joiner = Callable::new(joiner)?;
        let joined = || {
            topology::Joined::new()
                .with_key_serde(self.key.clone())
                .with_value_serde(self.value.clone())
        };
        let pairs: topology::KStream<PyObj, JoinPair> = if let Ok(other) = other.cast::<KStream>() {
            let other = other.borrow();
            let windows = windows.ok_or_else(|| {
                PyValueError::new_err("a stream-stream join needs windows=JoinWindows(...)")
            })?;
            let w = windows.inner;
            match kind {
                JoinKind::Inner => self.inner.join_stream(
                    &other.inner,
                    |l: &PyObj, r: &PyObj| (Some(l.clone()), Some(r.clone())),
                    w,
                    joined(),
                ),
                JoinKind::Left => self.inner.left_join_stream(
                    &other.inner,
                    |l: &PyObj, r: Option<&PyObj>| (Some(l.clone()), r.cloned()),
                    w,
                    joined(),
                ),
                JoinKind::Outer => self.inner.outer_join_stream(
                    &other.inner,
                    |l: Option<&PyObj>, r: Option<&PyObj>| (l.cloned(), r.cloned()),
                    w,
                    joined(),
                ),
            }
        } else if let Ok(table) = other.cast::<KTable>() {
            let table = table.borrow().values()?;
            match kind {
                JoinKind::Inner => self.inner.join_table(
                    &table,
                    |v: &PyObj, row: &PyObj| (Some(v.clone()), Some(row.clone())),
                    joined(),
                ),
                JoinKind::Left => self.inner.left_join_table(
                    &table,
                    |v: &PyObj, row: Option<&PyObj>| (Some(v.clone()), row.cloned()),
                    joined(),
                ),
                JoinKind::Outer => {
                    return Err(PyValueError::new_err(
                        "a stream joins a table with join or left_join; outer_join is for two streams or two tables",
                    ));
                }
            }
        } else if let Ok(global) = other.cast::<GlobalKTable>() {
            let selector = Callable::new(key_selector.ok_or_else(|| {
                PyValueError::new_err(
                    "a join with a global table needs key_selector(key, value) -> the row's key",
                )
            })?)?;
            let keyed = self
                .inner
                .process_values(move || GlobalKeyProcessor::new(selector.clone()), &[]);
            let global = &global.borrow().inner;
            let by_key = |_: &PyObj, v: &(PyObj, PyObj)| v.1.clone();
            match kind {
                JoinKind::Inner => keyed.join_global(global, by_key, |v, row: &PyObj| {
                    (Some(v.0.clone()), Some(row.clone()))
                }),
                JoinKind::Left => {
                    keyed.left_join_global(global, by_key, |v, row: Option<&PyObj>| {
                        (Some(v.0.clone()), row.cloned())
                    })
                }
                JoinKind::Outer => {
                    return Err(PyValueError::new_err(
                        "a stream joins a global table with join or left_join",
                    ));
                }
            }
        } else {
            return Err(PyTypeError::new_err(format!(
                "a stream joins a KStream, a KTable or a GlobalKTable, not {}",
                other.get_type().name()?
            )));
        };
        let inner = pairs.process_values(move || JoinProcessor::new(joiner.clone()), &[]);
        Ok(self.with(inner, Some(self.key.clone()), None))
    }

    /// One stream per predicate (a record goes to the first that holds),
    /// plus, with `default`, one of the records no predicate took.
    fn branches(&self, predicates: Vec<Callable>, default: bool) -> Vec<KStream> {
        let n = predicates.len();
        let tagged = self
            .inner
            .process_values(move || BranchProcessor::new(predicates.clone()), &[]);
        let outputs = if default { n + 1 } else { n };
        (0..outputs)
            .map(|i| {
                let inner = tagged
                    .filter(move |_, (tag, _)| *tag == i)
                    .map_values(|(_, value)| value);
                self.with(inner, Some(self.key.clone()), Some(self.value.clone()))
            })
            .collect()
    }
}

/// The branches of a [`KStream::split`] being defined.
#[pyclass(unsendable, module = "weir", name = "BranchedKStream")]
pub struct BranchedKStream {
    stream: Py<KStream>,
    prefix: String,
    branches: Vec<(String, Callable)>,
    ended: bool,
}

impl BranchedKStream {
    fn end<'py>(
        &mut self,
        py: Python<'py>,
        default: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if std::mem::replace(&mut self.ended, true) {
            return Err(PyValueError::new_err("this split() has ended already"));
        }
        let mut names: Vec<String> = self.branches.iter().map(|(n, _)| n.clone()).collect();
        let with_default = default.is_some();
        if let Some(name) = default {
            let name = format!("{}{name}", self.prefix);
            if names.contains(&name) {
                return Err(PyValueError::new_err(format!(
                    "branch name {name:?} is taken"
                )));
            }
            names.push(name);
        }
        let predicates = self.branches.drain(..).map(|(_, p)| p).collect();
        let streams = self.stream.borrow(py).branches(predicates, with_default);
        let out = PyDict::new(py);
        for (name, stream) in names.into_iter().zip(streams) {
            out.set_item(name, Bound::new(py, stream)?)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl BranchedKStream {
    /// Adds a branch of the records for which `predicate(key, value)` holds
    /// (and no earlier branch's did), named `prefix + name`.
    #[pyo3(signature = (predicate, name = None))]
    fn branch<'py>(
        mut slf: PyRefMut<'py, Self>,
        predicate: Bound<'py, PyAny>,
        name: Option<String>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        if slf.ended {
            return Err(PyValueError::new_err("this split() has ended already"));
        }
        let position = slf.branches.len() + 1;
        let name = format!(
            "{}{}",
            slf.prefix,
            name.unwrap_or_else(|| position.to_string())
        );
        if slf.branches.iter().any(|(n, _)| *n == name) {
            return Err(PyValueError::new_err(format!(
                "branch name {name:?} is taken"
            )));
        }
        slf.branches.push((name, Callable::new(predicate)?));
        Ok(slf)
    }

    /// Ends the split with a branch of the records no predicate took
    /// (`prefix + name`, name `0` unless given); returns every branch.
    #[pyo3(signature = (name = None))]
    fn default_branch<'py>(
        &mut self,
        py: Python<'py>,
        name: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.end(py, Some(name.unwrap_or_else(|| "0".to_string())))
    }

    /// Ends the split; records no predicate took are dropped. Returns
    /// every branch.
    fn no_default_branch<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.end(py, None)
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
        Ok(self.branches(predicates, false))
    }

    /// Kafka Streams' `split()`: add branches with `branch(predicate,
    /// name=None)` and end with `default_branch(name=None)` or
    /// `no_default_branch()`, which return a dict of `prefix + name` (a
    /// branch's position from 1 when unnamed, `0` for the default) to
    /// stream. A record goes to the first branch whose predicate holds.
    #[pyo3(signature = (prefix = String::new()))]
    fn split(slf: Bound<'_, Self>, prefix: String) -> BranchedKStream {
        BranchedKStream {
            stream: slf.unbind(),
            prefix,
            branches: Vec::new(),
            ended: false,
        }
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
            value,
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

    /// Inner join. With a `KStream` (and `windows=JoinWindows(...)`): each
    /// pair of records of a key at most the windows' difference apart
    /// becomes `joiner(value, other_value)`. With a `KTable`: each record
    /// whose key has a row becomes `joiner(value, row)`. With a
    /// `GlobalKTable` (and `key_selector(key, value)`, the row's key): each
    /// record whose selected row exists becomes `joiner(value, row)`.
    #[pyo3(signature = (other, joiner, windows = None, key_selector = None))]
    fn join(
        &self,
        other: &Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
        windows: Option<PyRef<'_, JoinWindows>>,
        key_selector: Option<Bound<'_, PyAny>>,
    ) -> PyResult<KStream> {
        self.join_any(
            other,
            joiner,
            JoinKind::Inner,
            windows.as_deref(),
            key_selector,
        )
    }

    /// Left join: as `join`, and a record without a match becomes
    /// `joiner(value, None)` (for two streams: once its window closed).
    #[pyo3(signature = (other, joiner, windows = None, key_selector = None))]
    fn left_join(
        &self,
        other: &Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
        windows: Option<PyRef<'_, JoinWindows>>,
        key_selector: Option<Bound<'_, PyAny>>,
    ) -> PyResult<KStream> {
        self.join_any(
            other,
            joiner,
            JoinKind::Left,
            windows.as_deref(),
            key_selector,
        )
    }

    /// Outer join of two streams: as `left_join`, and a record of `other`
    /// without a match becomes `joiner(None, other_value)`.
    fn outer_join(
        &self,
        other: &Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
        windows: PyRef<'_, JoinWindows>,
    ) -> PyResult<KStream> {
        self.join_any(other, joiner, JoinKind::Outer, Some(&*windows), None)
    }
}

/// The windows of a stream-stream join: records at most
/// `time_difference_ms` apart join; out-of-order records are accepted up
/// to `grace_ms` after their window.
#[pyclass(frozen, module = "weir", name = "JoinWindows")]
pub struct JoinWindows {
    inner: topology::JoinWindows,
}

#[pymethods]
impl JoinWindows {
    #[new]
    #[pyo3(signature = (time_difference_ms, grace_ms = 0))]
    fn new(time_difference_ms: u64, grace_ms: u64) -> Self {
        JoinWindows {
            inner: topology::JoinWindows::of_time_difference_and_grace(
                Duration::from_millis(time_difference_ms),
                Duration::from_millis(grace_ms),
            ),
        }
    }
}

/// A table replicated in full to every instance (every partition of its
/// topic), joined by a key selected from each stream record.
#[pyclass(unsendable, module = "weir", name = "GlobalKTable")]
pub struct GlobalKTable {
    inner: topology::GlobalKTable<PyObj, PyObj>,
}

/// A stream grouped by key, for an aggregation.
#[pyclass(unsendable, module = "weir", name = "KGroupedStream")]
pub struct KGroupedStream {
    inner: topology::KGroupedStream<PyObj, PyObj>,
    key: Serde,
    value: Serde,
    defaults: Defaults,
}

impl KGroupedStream {
    fn table(&self, inner: Table, value: Serde) -> KTable {
        KTable {
            inner,
            key: self.key.clone(),
            value,
            defaults: self.defaults.clone(),
        }
    }
}

#[pymethods]
impl KGroupedStream {
    /// Counts the records per key, in a RocksDB store with a changelog
    /// (named `store`, or generated).
    #[pyo3(signature = (store = None))]
    fn count(&self, store: Option<String>) -> KTable {
        let t = self.inner.count(materialized(store, &self.key));
        self.table(Table::Count(t), Serde::int_serde())
    }

    /// Combines the values per key with `reducer(aggregate, value)`; a key's
    /// first value is its aggregate. The aggregates are stored with the
    /// stream's value serde (or `value_serde`).
    #[pyo3(signature = (reducer, store = None, value_serde = None))]
    fn reduce(
        &self,
        reducer: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let value = serde_arg(value_serde).unwrap_or_else(|| self.value.clone());
        let m = materialized(store, &self.key).with_value_serde(value.clone());
        let t = self
            .inner
            .try_reduce(ops::reducer(Callable::new(reducer)?), m);
        Ok(self.table(Table::Values(t), value))
    }

    /// Folds the values per key: `aggregator(key, value, aggregate)` from
    /// `initializer()`, stored with `value_serde` (the builder's default
    /// value serde unless given).
    #[pyo3(signature = (initializer, aggregator, store = None, value_serde = None))]
    fn aggregate(
        &self,
        initializer: Bound<'_, PyAny>,
        aggregator: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let value = serde_arg(value_serde).unwrap_or_else(|| self.defaults.value.clone());
        let m = materialized(store, &self.key).with_value_serde(value.clone());
        let t = self.inner.try_aggregate(
            ops::initializer(Callable::new(initializer)?),
            ops::aggregator(Callable::new(aggregator)?),
            m,
        );
        Ok(self.table(Table::Values(t), value))
    }

    /// Windows the grouped stream: `TimeWindows` (tumbling, hopping),
    /// `SlidingWindows` or `SessionWindows`.
    fn windowed_by(&self, windows: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = windows.py();
        let base = WindowedBase {
            grouped: self.inner.clone(),
            key: self.key.clone(),
            value: self.value.clone(),
            defaults: self.defaults.clone(),
        };
        if let Ok(w) = windows.cast::<TimeWindows>() {
            let w = w.get();
            let (spec, emit) = (TimeSpec::Time(w.inner), w.emit);
            let key = Serde::windowed_serde(&self.key, Some(w.inner.size_ms()));
            return Ok(Py::new(
                py,
                TimeWindowedKStream {
                    spec,
                    emit,
                    key,
                    base,
                },
            )?
            .into_any());
        }
        if let Ok(w) = windows.cast::<SlidingWindows>() {
            let w = w.get();
            let (spec, emit) = (TimeSpec::Sliding(w.inner), w.emit);
            let key = Serde::windowed_serde(&self.key, Some(w.inner.time_difference_ms()));
            return Ok(Py::new(
                py,
                TimeWindowedKStream {
                    spec,
                    emit,
                    key,
                    base,
                },
            )?
            .into_any());
        }
        if let Ok(w) = windows.cast::<SessionWindows>() {
            let w = w.get();
            let (windows, emit) = (w.inner, w.emit);
            let key = Serde::windowed_serde(&self.key, None);
            return Ok(Py::new(
                py,
                SessionWindowedKStream {
                    windows,
                    emit,
                    key,
                    base,
                },
            )?
            .into_any());
        }
        Err(PyTypeError::new_err(format!(
            "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, not {}",
            windows.get_type().name()?
        )))
    }
}

fn emit_strategy(emit_final: bool) -> EmitStrategy {
    if emit_final {
        EmitStrategy::OnWindowClose
    } else {
        EmitStrategy::OnEveryUpdate
    }
}

fn window_error(e: weir::windows::WindowError) -> PyErr {
    PyValueError::new_err(e.to_string())
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
        let mut inner = weir::windows::TimeWindows::of_size_with_grace(
            Duration::from_millis(size_ms),
            Duration::from_millis(grace_ms),
        )
        .map_err(window_error)?;
        if let Some(advance) = advance_ms {
            inner = inner
                .advance_by(Duration::from_millis(advance))
                .map_err(window_error)?;
        }
        Ok(TimeWindows {
            inner,
            emit: emit_strategy(emit_final),
        })
    }
}

/// Sliding windows: a window of `time_difference_ms` ends at every record
/// (Kafka Streams' `SlidingWindows`).
#[pyclass(frozen, module = "weir", name = "SlidingWindows")]
pub struct SlidingWindows {
    inner: weir::windows::SlidingWindows,
    emit: EmitStrategy,
}

#[pymethods]
impl SlidingWindows {
    #[new]
    #[pyo3(signature = (time_difference_ms, grace_ms = 0, emit_final = false))]
    fn new(time_difference_ms: u64, grace_ms: u64, emit_final: bool) -> PyResult<Self> {
        Ok(SlidingWindows {
            inner: weir::windows::SlidingWindows::with_time_difference_and_grace(
                Duration::from_millis(time_difference_ms),
                Duration::from_millis(grace_ms),
            )
            .map_err(window_error)?,
            emit: emit_strategy(emit_final),
        })
    }
}

/// Session windows: a key's records less than `inactivity_gap_ms` apart
/// form one session.
#[pyclass(frozen, module = "weir", name = "SessionWindows")]
pub struct SessionWindows {
    inner: weir::windows::SessionWindows,
    emit: EmitStrategy,
}

#[pymethods]
impl SessionWindows {
    #[new]
    #[pyo3(signature = (inactivity_gap_ms, grace_ms = 0, emit_final = false))]
    fn new(inactivity_gap_ms: u64, grace_ms: u64, emit_final: bool) -> PyResult<Self> {
        Ok(SessionWindows {
            inner: weir::windows::SessionWindows::with_inactivity_gap_and_grace(
                Duration::from_millis(inactivity_gap_ms),
                Duration::from_millis(grace_ms),
            )
            .map_err(window_error)?,
            emit: emit_strategy(emit_final),
        })
    }
}

/// What a windowed stream keeps of its grouped stream.
struct WindowedBase {
    grouped: topology::KGroupedStream<PyObj, PyObj>,
    key: Serde,
    value: Serde,
    defaults: Defaults,
}

impl WindowedBase {
    /// The value serde of a windowed reduction (`value_serde`, else the
    /// stream's) and its store.
    fn reduce_store(
        &self,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> (Serde, Materialized<PyObj, PyObj>) {
        self.store(store, value_serde, &self.value)
    }

    /// The value serde of a windowed aggregation (`value_serde`, else the
    /// builder's default) and its store.
    fn aggregate_store(
        &self,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> (Serde, Materialized<PyObj, PyObj>) {
        self.store(store, value_serde, &self.defaults.value)
    }

    fn store(
        &self,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
        default: &Serde,
    ) -> (Serde, Materialized<PyObj, PyObj>) {
        let value = serde_arg(value_serde).unwrap_or_else(|| default.clone());
        let m = materialized(store, &self.key).with_value_serde(value.clone());
        (value, m)
    }

    fn table(&self, inner: Table, key: &Serde, value: Serde) -> KTable {
        KTable {
            inner,
            key: key.clone(),
            value,
            defaults: self.defaults.clone(),
        }
    }
}

/// A grouped stream windowed by time (tumbling, hopping or sliding
/// windows). The tables' keys are `(key, start_ms, end_ms)` tuples.
#[pyclass(unsendable, module = "weir", name = "TimeWindowedKStream")]
pub struct TimeWindowedKStream {
    spec: TimeSpec,
    emit: EmitStrategy,
    key: Serde,
    base: WindowedBase,
}

#[derive(Clone, Copy)]
enum TimeSpec {
    Time(weir::windows::TimeWindows),
    Sliding(weir::windows::SlidingWindows),
}

impl TimeWindowedKStream {
    /// Weir's windowed stream, made for each aggregation (it is consumed by it).
    fn windowed(&self) -> topology::TimeWindowedKStream<PyObj, PyObj> {
        let g = &self.base.grouped;
        match self.spec {
            TimeSpec::Time(w) => g.windowed_by(w),
            TimeSpec::Sliding(w) => g.windowed_by_sliding(w),
        }
        .emit(self.emit)
    }
}

#[pymethods]
impl TimeWindowedKStream {
    /// Counts the records per key and window.
    #[pyo3(signature = (store = None))]
    fn count(&self, store: Option<String>) -> KTable {
        let t = self.windowed().count(materialized(store, &self.base.key));
        self.base
            .table(Table::WindowedCount(t), &self.key, Serde::int_serde())
    }

    /// Combines the values per key and window with `reducer(aggregate,
    /// value)`.
    #[pyo3(signature = (reducer, store = None, value_serde = None))]
    fn reduce(
        &self,
        reducer: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let (value, m) = self.base.reduce_store(store, value_serde);
        let t = self
            .windowed()
            .try_reduce(ops::reducer(Callable::new(reducer)?), m);
        Ok(self.base.table(Table::Windowed(t), &self.key, value))
    }

    /// Folds the values per key and window: `aggregator(key, value,
    /// aggregate)` from `initializer()`.
    #[pyo3(signature = (initializer, aggregator, store = None, value_serde = None))]
    fn aggregate(
        &self,
        initializer: Bound<'_, PyAny>,
        aggregator: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let (value, m) = self.base.aggregate_store(store, value_serde);
        let t = self.windowed().try_aggregate(
            ops::initializer(Callable::new(initializer)?),
            ops::aggregator(Callable::new(aggregator)?),
            m,
        );
        Ok(self.base.table(Table::Windowed(t), &self.key, value))
    }
}

/// A grouped stream windowed into sessions. The table's keys are `(key,
/// start_ms, end_ms)` tuples.
#[pyclass(unsendable, module = "weir", name = "SessionWindowedKStream")]
pub struct SessionWindowedKStream {
    windows: weir::windows::SessionWindows,
    emit: EmitStrategy,
    key: Serde,
    base: WindowedBase,
}

impl SessionWindowedKStream {
    /// Weir's session-windowed stream, made for each aggregation (it is
    /// consumed by it).
    fn windowed(&self) -> topology::SessionWindowedKStream<PyObj, PyObj> {
        self.base
            .grouped
            .windowed_by_session(self.windows)
            .emit(self.emit)
    }
}

#[pymethods]
impl SessionWindowedKStream {
    /// Counts the records per key and session.
    #[pyo3(signature = (store = None))]
    fn count(&self, store: Option<String>) -> KTable {
        let t = self.windowed().count(materialized(store, &self.base.key));
        self.base
            .table(Table::WindowedCount(t), &self.key, Serde::int_serde())
    }

    /// Combines the values per key and session with `reducer(aggregate,
    /// value)`, which also combines two sessions a record bridges.
    #[pyo3(signature = (reducer, store = None, value_serde = None))]
    fn reduce(
        &self,
        reducer: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let (value, m) = self.base.reduce_store(store, value_serde);
        let t = self
            .windowed()
            .try_reduce(ops::reducer(Callable::new(reducer)?), m);
        Ok(self.base.table(Table::Windowed(t), &self.key, value))
    }

    /// Folds the values per key and session: `aggregator(key, value,
    /// aggregate)` from `initializer()`; `merger(key, a, b)` combines the
    /// aggregates of two sessions a record bridges.
    #[pyo3(signature = (initializer, aggregator, merger, store = None, value_serde = None))]
    fn aggregate(
        &self,
        initializer: Bound<'_, PyAny>,
        aggregator: Bound<'_, PyAny>,
        merger: Bound<'_, PyAny>,
        store: Option<String>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> PyResult<KTable> {
        let (value, m) = self.base.aggregate_store(store, value_serde);
        let t = self.windowed().try_aggregate(
            ops::initializer(Callable::new(initializer)?),
            ops::aggregator(Callable::new(aggregator)?),
            ops::merger(Callable::new(merger)?),
            m,
        );
        Ok(self.base.table(Table::Windowed(t), &self.key, value))
    }
}

enum Table {
    Values(topology::KTable<PyObj, PyObj>),
    Count(topology::KTable<PyObj, i64>),
    Windowed(topology::KTable<Windowed<PyObj>, PyObj>),
    WindowedCount(topology::KTable<Windowed<PyObj>, i64>),
    /// A table-table join: the pairs, and the joiner applied to them on
    /// `to_stream`.
    Joined(topology::KTable<PyObj, JoinPair>, Callable),
}

/// A changelog stream: the latest value per key.
#[pyclass(unsendable, module = "weir", name = "KTable")]
pub struct KTable {
    inner: Table,
    key: Serde,
    value: Serde,
    defaults: Defaults,
}

fn window_tuple(w: &Windowed<PyObj>) -> PyObj {
    crate::value::attach(|py| {
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
    })
}

fn or_none(v: Option<PyObj>) -> PyObj {
    v.unwrap_or_else(|| crate::value::attach(PyObj::none))
}

impl KTable {
    /// The table with Python values, keyed by Python keys (what a join
    /// reads).
    fn values(&self) -> PyResult<topology::KTable<PyObj, PyObj>> {
        match &self.inner {
            Table::Values(t) => Ok(t.clone()),
            Table::Count(t) => Ok(t.map_values(|n| to_py_int(Some(n)))),
            Table::Windowed(_) | Table::WindowedCount(_) => Err(PyValueError::new_err(
                "a windowed table's keys are windows: join its to_stream() instead",
            )),
            Table::Joined(..) => Err(PyValueError::new_err(
                "the result of a table-table join is read through to_stream(); join that \
                 stream, or aggregate it into a table",
            )),
        }
    }

    fn foreign_key_join(
        &self,
        other: &KTable,
        foreign_key: Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
        left: bool,
    ) -> PyResult<KTable> {
        let (this, that) = (self.values()?, other.values()?);
        let extract = ops::foreign_key(Callable::new(foreign_key)?);
        let joiner = ops::foreign_key_joiner(Callable::new(joiner)?);
        let joined = if left {
            this.try_left_join_on_foreign_key(&that, extract, joiner)
        } else {
            this.try_join_on_foreign_key(&that, extract, move |v, o| joiner(v, Some(o)))
        };
        Ok(KTable {
            inner: Table::Values(joined),
            key: self.key.clone(),
            value: self.defaults.value.clone(),
            defaults: self.defaults.clone(),
        })
    }

    fn join_table(
        &self,
        other: &KTable,
        joiner: Bound<'_, PyAny>,
        kind: JoinKind,
    ) -> PyResult<KTable> {
        let joiner = Callable::new(joiner)?;
        let (left, right) = (self.values()?, other.values()?);
        let pairs = match kind {
            JoinKind::Inner => left.join(&right, |l: &PyObj, r: &PyObj| {
                (Some(l.clone()), Some(r.clone()))
            }),
            JoinKind::Left => left.left_join(&right, |l: &PyObj, r: Option<&PyObj>| {
                (Some(l.clone()), r.cloned())
            }),
            JoinKind::Outer => left.outer_join(&right, |l: Option<&PyObj>, r: Option<&PyObj>| {
                (l.cloned(), r.cloned())
            }),
        };
        Ok(KTable {
            inner: Table::Joined(pairs, joiner),
            key: self.key.clone(),
            value: self.defaults.value.clone(),
            defaults: self.defaults.clone(),
        })
    }
}

#[pymethods]
impl KTable {
    /// The stream of the table's updates (`None` values for deletions).
    fn to_stream(&self) -> KStream {
        let inner: Stream = match &self.inner {
            Table::Values(t) => t.to_stream().map_values(or_none),
            Table::Count(t) => t.to_stream().map_values(to_py_int),
            Table::Windowed(t) => t
                .to_stream()
                .map(|w: Windowed<PyObj>, v: Option<PyObj>| (window_tuple(&w), or_none(v))),
            Table::WindowedCount(t) => t
                .to_stream()
                .map(|w: Windowed<PyObj>, n: Option<i64>| (window_tuple(&w), to_py_int(n))),
            Table::Joined(t, joiner) => {
                let joiner = joiner.clone();
                t.to_stream()
                    .process_values(move || TableJoinProcessor::new(joiner.clone()), &[])
            }
        };
        KStream::of(
            inner,
            Some(self.key.clone()),
            Some(self.value.clone()),
            &self.defaults,
        )
    }

    /// Inner join with `other` by key: a row `joiner(value, other_value)`
    /// for every key in both.
    fn join(&self, other: &KTable, joiner: Bound<'_, PyAny>) -> PyResult<KTable> {
        self.join_table(other, joiner, JoinKind::Inner)
    }

    /// Left join: a row for every key of this table, `other_value` `None`
    /// where `other` has none.
    fn left_join(&self, other: &KTable, joiner: Bound<'_, PyAny>) -> PyResult<KTable> {
        self.join_table(other, joiner, JoinKind::Left)
    }

    /// Outer join: a row for every key of either table.
    fn outer_join(&self, other: &KTable, joiner: Bound<'_, PyAny>) -> PyResult<KTable> {
        self.join_table(other, joiner, JoinKind::Outer)
    }

    /// Foreign-key join: each row of this table whose `foreign_key(value)`
    /// is a key of `other` becomes `joiner(value, other_value)`, under this
    /// table's key. Updates on either side update the result; a row whose
    /// foreign key changes leaves its old match. The tables need not be
    /// co-partitioned (Weir repartitions by the foreign key and back).
    fn join_on_foreign_key(
        &self,
        other: &KTable,
        foreign_key: Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
    ) -> PyResult<KTable> {
        self.foreign_key_join(other, foreign_key, joiner, false)
    }

    /// Left foreign-key join: every row of this table becomes
    /// `joiner(value, other_value)`, `other_value` `None` while `other` has
    /// no row for its foreign key.
    fn left_join_on_foreign_key(
        &self,
        other: &KTable,
        foreign_key: Bound<'_, PyAny>,
        joiner: Bound<'_, PyAny>,
    ) -> PyResult<KTable> {
        self.foreign_key_join(other, foreign_key, joiner, true)
    }
}
