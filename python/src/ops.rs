//! The Python callables of a topology, run as Weir processors: each call
//! holds the GIL for the call only, and a raised exception is a processing
//! error (the configured handler fails the task, skips the record or
//! dead-letters it) whose reason carries the Python traceback.

use pyo3::prelude::*;
use weir::processor::{Processor, ProcessorContext, ProcessorError, Record};

use crate::value::{Callable, PyObj, describe};

#[derive(Clone, Copy)]
pub enum Op {
    /// `f(key, value) -> bool`: keep when true.
    Filter,
    /// `f(key, value) -> bool`: drop when true.
    FilterNot,
    /// `f(value) -> value`.
    MapValues,
    /// `f(value) -> iterable of values`.
    FlatMapValues,
    /// `f(key, value) -> (key, value)`.
    Map,
    /// `f(key, value) -> iterable of (key, value)`.
    FlatMap,
    /// `f(key, value) -> key`.
    SelectKey,
    /// `f(key, value)`, the record passes on unchanged.
    Peek,
    /// `f(value, other) -> value`: the join's value pair to the joined value.
    Join,
    /// `f(key, value) -> bool` per branch: the index of the first that holds
    /// (the number of branches if none).
    Branch,
    /// `f(key, value) -> key` of a row in a global table.
    KeySelector,
    /// `f(aggregate, value) -> aggregate`.
    Reduce,
    /// `f() -> aggregate`.
    Initialize,
    /// `f(key, value, aggregate) -> aggregate`.
    Aggregate,
    /// `f(key, a, b) -> aggregate` of two sessions a record bridges.
    Merge,
    /// `f(value) -> key` of the other table's row (a foreign-key join).
    ForeignKey,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Filter => "filter",
            Op::FilterNot => "filter_not",
            Op::MapValues => "map_values",
            Op::FlatMapValues => "flat_map_values",
            Op::Map => "map",
            Op::FlatMap => "flat_map",
            Op::SelectKey => "select_key",
            Op::Peek => "peek",
            Op::Join => "join",
            Op::Branch => "branch",
            Op::KeySelector => "key selector",
            Op::Reduce => "reducer",
            Op::Initialize => "initializer",
            Op::Aggregate => "aggregator",
            Op::Merge => "merger",
            Op::ForeignKey => "foreign_key",
        }
    }
}

/// What one call produced.
enum Out {
    Drop,
    Pass,
    One(PyObj, PyObj),
    Many(Vec<(PyObj, PyObj)>),
}

/// A processor running one Python callable per record.
pub struct PyProcessor {
    op: Op,
    functions: Vec<Callable>,
}

impl PyProcessor {
    pub fn new(op: Op, functions: Vec<Callable>) -> Self {
        PyProcessor { op, functions }
    }

    fn call(&self, py: Python<'_>, key: &PyObj, value: &PyObj) -> PyResult<Out> {
        let f = || self.functions[0].bind(py);
        let (k, v) = (key.bind(py), value.bind(py));
        Ok(match self.op {
            Op::Filter => keep(f().call1((k, v))?.is_truthy()?),
            Op::FilterNot => keep(!f().call1((k, v))?.is_truthy()?),
            Op::MapValues => Out::One(key.clone(), PyObj::from_bound(f().call1((v,))?)),
            Op::FlatMapValues => Out::Many(
                f().call1((v,))?
                    .try_iter()?
                    .map(|item| Ok((key.clone(), PyObj::from_bound(item?))))
                    .collect::<PyResult<_>>()?,
            ),
            Op::Map => {
                let (k2, v2) = f().call1((k, v))?.extract()?;
                Out::One(PyObj::from_bound(k2), PyObj::from_bound(v2))
            }
            Op::FlatMap => Out::Many(
                f().call1((k, v))?
                    .try_iter()?
                    .map(|item| {
                        let (k2, v2): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
                        Ok((PyObj::from_bound(k2), PyObj::from_bound(v2)))
                    })
                    .collect::<PyResult<_>>()?,
            ),
            Op::SelectKey => Out::One(PyObj::from_bound(f().call1((k, v))?), value.clone()),
            Op::Peek => {
                f().call1((k, v))?;
                Out::Pass
            }
            Op::Join
            | Op::Branch
            | Op::KeySelector
            | Op::Reduce
            | Op::Initialize
            | Op::Aggregate
            | Op::Merge
            | Op::ForeignKey => {
                unreachable!("{} runs in its own processor", self.op.name())
            }
        })
    }
}

fn keep(yes: bool) -> Out {
    if yes { Out::Pass } else { Out::Drop }
}

fn user_error(op: Op, reason: String) -> ProcessorError {
    ProcessorError::user(format!("Python {} callable raised: {reason}", op.name()))
}

impl Processor<PyObj, PyObj, PyObj, PyObj> for PyProcessor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, PyObj, PyObj>,
        record: Record<PyObj, PyObj>,
    ) -> Result<(), ProcessorError> {
        let out = crate::value::attach(|py| {
            self.call(py, &record.key, &record.value)
                .map_err(|e| describe(py, &e))
        })
        .map_err(|reason| user_error(self.op, reason))?;
        // Forwarded without the GIL: downstream nodes take it for their own
        // calls only.
        match out {
            Out::Drop => Ok(()),
            Out::Pass => ctx.forward(record),
            Out::One(key, value) => ctx.forward(Record {
                key,
                value,
                timestamp: record.timestamp,
                headers: record.headers,
            }),
            Out::Many(items) => {
                for (key, value) in items {
                    ctx.forward(Record {
                        key,
                        value,
                        timestamp: record.timestamp,
                        headers: record.headers.clone(),
                    })?;
                }
                Ok(())
            }
        }
    }
}

/// A join's result: the two sides' values (`None` for a side without a
/// match), combined by the Python joiner in a processor after the join
/// node, so that an exception in the joiner is a processing error.
pub type JoinPair = (Option<PyObj>, Option<PyObj>);

/// A join side's value for the joiner: `None` where the side has none.
fn side<'py>(py: Python<'py>, value: Option<&PyObj>) -> Bound<'py, PyAny> {
    match value {
        Some(v) => v.bind(py).clone(),
        None => py.None().into_bound(py),
    }
}

fn join_pair(py: Python<'_>, joiner: &Callable, pair: &JoinPair) -> PyResult<PyObj> {
    joiner
        .bind(py)
        .call1((side(py, pair.0.as_ref()), side(py, pair.1.as_ref())))
        .map(PyObj::from_bound)
}

/// Applies the joiner of a stream join.
pub struct JoinProcessor {
    joiner: Callable,
}

impl JoinProcessor {
    pub fn new(joiner: Callable) -> Self {
        JoinProcessor { joiner }
    }
}

impl Processor<PyObj, JoinPair, PyObj, PyObj> for JoinProcessor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, PyObj, PyObj>,
        record: Record<PyObj, JoinPair>,
    ) -> Result<(), ProcessorError> {
        let joined = crate::value::attach(|py| {
            join_pair(py, &self.joiner, &record.value).map_err(|e| describe(py, &e))
        })
        .map_err(|reason| user_error(Op::Join, reason))?;
        ctx.forward(Record {
            key: record.key,
            value: joined,
            timestamp: record.timestamp,
            headers: record.headers,
        })
    }
}

/// Applies the joiner of a table-table join to the updates of the joined
/// table (`None`, a deletion, stays `None`).
pub struct TableJoinProcessor {
    joiner: Callable,
}

impl TableJoinProcessor {
    pub fn new(joiner: Callable) -> Self {
        TableJoinProcessor { joiner }
    }
}

impl Processor<PyObj, Option<JoinPair>, PyObj, PyObj> for TableJoinProcessor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, PyObj, PyObj>,
        record: Record<PyObj, Option<JoinPair>>,
    ) -> Result<(), ProcessorError> {
        let joined = crate::value::attach(|py| match &record.value {
            Some(pair) => join_pair(py, &self.joiner, pair).map_err(|e| describe(py, &e)),
            None => Ok(PyObj::none(py)),
        })
        .map_err(|reason| user_error(Op::Join, reason))?;
        ctx.forward(Record {
            key: record.key,
            value: joined,
            timestamp: record.timestamp,
            headers: record.headers,
        })
    }
}

/// Pairs each value with `key_selector(key, value)`, the key of its row
/// in a global table: the join node then reads the pair without the GIL.
pub struct GlobalKeyProcessor {
    selector: Callable,
}

impl GlobalKeyProcessor {
    pub fn new(selector: Callable) -> Self {
        GlobalKeyProcessor { selector }
    }
}

impl Processor<PyObj, PyObj, PyObj, (PyObj, PyObj)> for GlobalKeyProcessor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, PyObj, (PyObj, PyObj)>,
        record: Record<PyObj, PyObj>,
    ) -> Result<(), ProcessorError> {
        let global_key = crate::value::attach(|py| {
            self.selector
                .bind(py)
                .call1((record.key.bind(py), record.value.bind(py)))
                .map(PyObj::from_bound)
                .map_err(|e| describe(py, &e))
        })
        .map_err(|reason| user_error(Op::KeySelector, reason))?;
        ctx.forward(Record {
            key: record.key,
            value: (record.value, global_key),
            timestamp: record.timestamp,
            headers: record.headers,
        })
    }
}

/// One call of an aggregation step: an exception is the record's
/// processing error.
fn step(
    op: Op,
    call: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>>,
) -> Result<PyObj, ProcessorError> {
    crate::value::attach(|py| {
        call(py)
            .map(PyObj::from_bound)
            .map_err(|e| describe(py, &e))
    })
    .map_err(|reason| user_error(op, reason))
}

/// `reducer(aggregate, value)` for `try_reduce`.
pub fn reducer(
    f: Callable,
) -> impl Fn(&PyObj, PyObj) -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move |aggregate, value| {
        step(Op::Reduce, |py| {
            f.bind(py).call1((aggregate.bind(py), value.bind(py)))
        })
    }
}

/// `initializer()` for `try_aggregate`.
pub fn initializer(
    f: Callable,
) -> impl Fn() -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move || step(Op::Initialize, |py| f.bind(py).call0())
}

/// `aggregator(key, value, aggregate)` for `try_aggregate`.
pub fn aggregator(
    f: Callable,
) -> impl Fn(&PyObj, PyObj, &PyObj) -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move |key, value, aggregate| {
        step(Op::Aggregate, |py| {
            f.bind(py)
                .call1((key.bind(py), value.bind(py), aggregate.bind(py)))
        })
    }
}

/// `merger(key, a, b)` of two session aggregates for `try_aggregate`.
pub fn merger(
    f: Callable,
) -> impl Fn(&PyObj, &PyObj, PyObj) -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move |key, a, b| {
        step(Op::Merge, |py| {
            f.bind(py).call1((key.bind(py), a.bind(py), b.bind(py)))
        })
    }
}

/// `foreign_key(value)` of a foreign-key join's left row.
pub fn foreign_key(
    f: Callable,
) -> impl Fn(&PyObj) -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move |value| step(Op::ForeignKey, |py| f.bind(py).call1((value.bind(py),)))
}

/// `joiner(value, other_row)` of a foreign-key join (`other_row` `None` in
/// a left join without a match).
pub fn foreign_key_joiner(
    f: Callable,
) -> impl Fn(&PyObj, Option<&PyObj>) -> Result<PyObj, ProcessorError> + Send + Sync + 'static {
    move |value, row| {
        step(Op::Join, |py| {
            f.bind(py).call1((value.bind(py), side(py, row)))
        })
    }
}

/// Tags each record with the index of the first branch predicate that
/// holds; the branches filter on the tag without the GIL.
pub struct BranchProcessor {
    predicates: Vec<Callable>,
}

impl BranchProcessor {
    pub fn new(predicates: Vec<Callable>) -> Self {
        BranchProcessor { predicates }
    }
}

impl Processor<PyObj, PyObj, PyObj, (usize, PyObj)> for BranchProcessor {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, PyObj, (usize, PyObj)>,
        record: Record<PyObj, PyObj>,
    ) -> Result<(), ProcessorError> {
        let index = crate::value::attach(|py| {
            let (k, v) = (record.key.bind(py), record.value.bind(py));
            for (i, p) in self.predicates.iter().enumerate() {
                if p.bind(py).call1((k, v))?.is_truthy()? {
                    return Ok(i);
                }
            }
            Ok(self.predicates.len())
        })
        .map_err(|e: PyErr| crate::value::attach(|py| user_error(Op::Branch, describe(py, &e))))?;
        ctx.forward(Record {
            key: record.key,
            value: (index, record.value),
            timestamp: record.timestamp,
            headers: record.headers,
        })
    }
}
