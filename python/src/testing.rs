//! `weir.Broker`: Weir's real-broker test helpers (`weir::testing`)
//! for Python tests: the broker in `KAFKA_BOOTSTRAP_SERVERS` (or a
//! testcontainers Kafka when a Docker engine is reachable), topic creation,
//! producing, and reading back with `read_committed`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let reason = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        PyRuntimeError::new_err(format!("{what}: {reason}"))
    })
}

/// The Kafka broker of the tests.
#[pyclass(frozen, module = "weir", name = "Broker")]
pub struct TestBroker {
    inner: &'static weir::testing::TestBroker,
}

#[pymethods]
impl TestBroker {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let inner = py.detach(|| guarded("finding a broker", weir::testing::broker))?;
        Ok(TestBroker { inner })
    }

    /// Its bootstrap address (`host:port`).
    #[getter]
    fn bootstrap_servers(&self) -> &str {
        self.inner.bootstrap_servers()
    }

    /// A name unique to this process and call: `<prefix>-<pid>-<n>-<nanos>`.
    #[staticmethod]
    fn unique_name(prefix: &str) -> String {
        weir::testing::unique_name(prefix)
    }

    /// Creates `topics` (`{name: partitions}`) and waits until they are visible.
    fn create_topics(&self, py: Python<'_>, topics: Vec<(String, i32)>) -> PyResult<()> {
        py.detach(|| {
            guarded("creating topics", || {
                let refs: Vec<(&str, i32)> = topics.iter().map(|(n, p)| (n.as_str(), *p)).collect();
                self.inner.create_topics(&refs)
            })
        })
    }

    /// Produces `(key, value)` byte pairs (key `None`: no key) and waits
    /// for every acknowledgement; returns how many were written.
    fn produce(
        &self,
        py: Python<'_>,
        topic: &str,
        records: Vec<(Option<Vec<u8>>, Vec<u8>)>,
    ) -> PyResult<u64> {
        py.detach(|| guarded("producing", || self.inner.produce(topic, records)))
    }

    /// Every record of `topic` from the start to its current end, as
    /// `(key, value, partition, offset)` with `isolation.level=read_committed`.
    #[allow(clippy::type_complexity)]
    fn read_committed<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
    ) -> PyResult<
        Vec<(
            Option<Bound<'py, PyBytes>>,
            Option<Bound<'py, PyBytes>>,
            i32,
            i64,
        )>,
    > {
        let records = py.detach(|| guarded("reading", || self.inner.read_committed(topic)))?;
        Ok(records
            .into_iter()
            .map(|r| {
                (
                    r.key.as_deref().map(|k| PyBytes::new(py, k)),
                    r.value.as_deref().map(|v| PyBytes::new(py, v)),
                    r.partition,
                    r.offset,
                )
            })
            .collect())
    }
}
