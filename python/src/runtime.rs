//! Running a topology from Python: `KafkaStreams` on a real broker and the
//! in-memory `TopologyTestDriver` (with `TestInputTopic` and
//! `TestOutputTopic`) for unit tests without one.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use weir::config::StreamsConfig;
use weir::driver::{DriverConfig, ProducedRecord};
use weir::handler::ErrorHandling;
use weir::processor::Headers;
use weir::runtime::AppState;

use crate::dsl::Topology;
use crate::serde::Serde;
use crate::value::describe;

fn state_name(state: AppState) -> &'static str {
    match state {
        AppState::Created => "CREATED",
        AppState::Rebalancing => "REBALANCING",
        AppState::Running => "RUNNING",
        AppState::PendingShutdown => "PENDING_SHUTDOWN",
        AppState::NotRunning => "NOT_RUNNING",
        AppState::PendingError => "PENDING_ERROR",
        AppState::Error => "ERROR",
    }
}

/// One instance of a streams application: stream threads in a consumer
/// group, RocksDB state, changelogs, transactions, metrics and (with
/// `http_address` set) the HTTP server. The callables of the topology run
/// on Weir's stream threads, each call holding the GIL only for itself.
#[pyclass(module = "weir", name = "KafkaStreams")]
pub struct KafkaStreams {
    inner: Mutex<weir::runtime::KafkaStreams>,
}

#[pymethods]
impl KafkaStreams {
    /// `config`: Weir's settings as `weir run` reads them from its TOML
    /// (`application_id`, `bootstrap_servers`, `processing_guarantee`,
    /// `num_stream_threads`, `state_dir`, `processing_handler`, `kafka.*`
    /// …); values may be of any type, they are passed as text.
    #[new]
    fn new(topology: &Topology, config: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut pairs = Vec::new();
        for (key, value) in config.iter() {
            let value = match value.extract::<bool>() {
                Ok(b) => b.to_string(),
                Err(_) => value.str()?.to_cow()?.into_owned(),
            };
            pairs.push((key.str()?.to_cow()?.into_owned(), value));
        }
        let config = StreamsConfig::from_pairs(pairs)
            .map_err(|e| PyValueError::new_err(format!("config: {e}")))?;
        let inner = weir::runtime::KafkaStreams::new(topology.take()?, config)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(KafkaStreams {
            inner: Mutex::new(inner),
        })
    }

    /// Starts the stream threads (and the HTTP server, when configured).
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.lock().expect("streams lock").start())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Commits, closes the tasks and leaves the group; `True` when every
    /// thread ended within `timeout` seconds.
    #[pyo3(signature = (timeout = 30.0))]
    fn close(&self, py: Python<'_>, timeout: f64) -> bool {
        py.detach(|| {
            self.inner
                .lock()
                .expect("streams lock")
                .close(Duration::from_secs_f64(timeout))
        })
    }

    /// `CREATED`, `REBALANCING`, `RUNNING`, `PENDING_SHUTDOWN`,
    /// `NOT_RUNNING`, `PENDING_ERROR` or `ERROR`.
    #[getter]
    fn state(&self) -> &'static str {
        state_name(self.inner.lock().expect("streams lock").state())
    }

    /// Waits up to `timeout` seconds for the state `state`; the state then.
    #[pyo3(signature = (state, timeout = 60.0))]
    fn wait_for_state(&self, py: Python<'_>, state: String, timeout: f64) -> &'static str {
        let inner = self.inner.lock().expect("streams lock");
        let reached = py.detach(|| {
            inner.wait_for_state(Duration::from_secs_f64(timeout), |s| {
                state_name(s) == state || matches!(s, AppState::Error)
            })
        });
        state_name(reached)
    }

    /// The fatal error that stopped the instance, if any.
    #[getter]
    fn error(&self) -> Option<String> {
        self.inner
            .lock()
            .expect("streams lock")
            .error()
            .map(|e| e.to_string())
    }

    /// The address the HTTP server listens on (`host:port`), if it runs.
    #[getter]
    fn http_address(&self) -> Option<String> {
        self.inner
            .lock()
            .expect("streams lock")
            .http_addr()
            .map(|a| a.to_string())
    }

    /// The metrics in Prometheus' text format (what `GET /metrics` serves).
    fn metrics(&self) -> String {
        self.inner
            .lock()
            .expect("streams lock")
            .metrics()
            .encode_text()
    }

    fn __enter__<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<PyRef<'py, Self>> {
        KafkaStreams::start(&slf, py)?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py, 30.0);
        false
    }
}

/// Runs a topology in memory, one record at a time, with no broker: what
/// Kafka Streams' `TopologyTestDriver` is for unit tests.
#[pyclass(unsendable, module = "weir", name = "TopologyTestDriver")]
pub struct TopologyTestDriver {
    inner: Option<weir::driver::TopologyTestDriver>,
}

impl TopologyTestDriver {
    fn driver(&mut self) -> PyResult<&mut weir::driver::TopologyTestDriver> {
        self.inner
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the driver is closed"))
    }
}

fn handler(value: &str) -> PyResult<ErrorHandling> {
    value.parse().map_err(|e: String| PyValueError::new_err(e))
}

#[pymethods]
impl TopologyTestDriver {
    /// `processing_handler` / `deserialization_handler`: `log_and_fail`
    /// (the default: the error is raised), `log_and_continue` or
    /// `dead_letter:<topic>`; `cache_max_bytes`: the aggregations' record
    /// cache (0: every update is emitted).
    #[new]
    #[pyo3(signature = (topology, application_id = "test", processing_handler = "log_and_fail", deserialization_handler = "log_and_fail", cache_max_bytes = 0, initial_wall_clock_ms = 0))]
    fn new(
        topology: &Topology,
        application_id: &str,
        processing_handler: &str,
        deserialization_handler: &str,
        cache_max_bytes: u64,
        initial_wall_clock_ms: i64,
    ) -> PyResult<Self> {
        let mut config = DriverConfig::new(application_id)
            .with_processing_handler(handler(processing_handler)?)
            .with_deserialization_handler(handler(deserialization_handler)?)
            .with_cache_max_bytes(cache_max_bytes);
        config.initial_wall_clock_ms = initial_wall_clock_ms;
        let inner = weir::driver::TopologyTestDriver::new(topology.take()?, config)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(TopologyTestDriver { inner: Some(inner) })
    }

    /// An input topic to pipe records into.
    #[pyo3(signature = (topic, key_serde = None, value_serde = None))]
    fn create_input_topic(
        slf: Bound<'_, Self>,
        topic: String,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> TestInputTopic {
        TestInputTopic {
            driver: slf.unbind(),
            topic,
            key: key_serde.map_or_else(Serde::bytes_serde, |s| s.get().clone()),
            value: value_serde.map_or_else(Serde::bytes_serde, |s| s.get().clone()),
            timestamp: 0,
        }
    }

    /// An output topic to read what the topology wrote to it.
    #[pyo3(signature = (topic, key_serde = None, value_serde = None))]
    fn create_output_topic(
        slf: Bound<'_, Self>,
        topic: String,
        key_serde: Option<&Bound<'_, Serde>>,
        value_serde: Option<&Bound<'_, Serde>>,
    ) -> TestOutputTopic {
        TestOutputTopic {
            driver: slf.unbind(),
            topic,
            key: key_serde.map_or_else(Serde::bytes_serde, |s| s.get().clone()),
            value: value_serde.map_or_else(Serde::bytes_serde, |s| s.get().clone()),
        }
    }

    /// Advances the wall clock by `ms`, running wall-clock punctuations.
    fn advance_wall_clock_time(&mut self, ms: u64) -> PyResult<()> {
        self.driver()?
            .advance_wall_clock_time(Duration::from_millis(ms))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The topics the topology wrote to.
    fn written_topics(&mut self) -> PyResult<Vec<String>> {
        Ok(self
            .driver()?
            .written_topics()
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    /// Closes the tasks (flushing their stores).
    fn close(&mut self) -> PyResult<()> {
        match self.inner.take() {
            Some(d) => d
                .close()
                .map_err(|e| PyRuntimeError::new_err(e.to_string())),
            None => Ok(()),
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }
}

/// An input topic of a `TopologyTestDriver`.
#[pyclass(unsendable, module = "weir", name = "TestInputTopic")]
pub struct TestInputTopic {
    driver: Py<TopologyTestDriver>,
    topic: String,
    key: Serde,
    value: Serde,
    /// The timestamp of a record piped without one: the last one given.
    timestamp: i64,
}

#[pymethods]
impl TestInputTopic {
    /// Pipes one record and processes it (and all it causes downstream).
    /// Without `timestamp` the record gets the last timestamp given (0 at
    /// first). A processing error the handler does not absorb is raised as
    /// `RuntimeError`, with the Python traceback of a failing callable.
    #[pyo3(signature = (key, value, timestamp = None, headers = None))]
    fn pipe_input(
        &mut self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timestamp: Option<i64>,
        headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    ) -> PyResult<()> {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let has_key = self.key.encode(key, &mut k)?;
        let has_value = self.value.encode(value, &mut v)?;
        if let Some(ts) = timestamp {
            self.timestamp = ts;
        }
        let mut h = Headers::default();
        for (name, value) in headers.unwrap_or_default() {
            h.add(name, value);
        }
        let mut driver = self.driver.borrow_mut(py);
        driver
            .driver()?
            .pipe_raw(
                &self.topic,
                has_key.then_some(k.as_slice()),
                has_value.then_some(v.as_slice()),
                self.timestamp,
                &h,
            )
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Pipes `(key, value)` pairs, or `(key, value, timestamp)` triples.
    fn pipe_key_value_list(&mut self, py: Python<'_>, records: &Bound<'_, PyList>) -> PyResult<()> {
        for record in records.iter() {
            let (key, value, ts): (Bound<'_, PyAny>, Bound<'_, PyAny>, Option<i64>) =
                match record.extract() {
                    Ok(triple) => triple,
                    Err(_) => {
                        let (k, v) = record.extract()?;
                        (k, v, None)
                    }
                };
            self.pipe_input(py, &key, &value, ts, None)?;
        }
        Ok(())
    }
}

/// An output topic of a `TopologyTestDriver`.
#[pyclass(unsendable, module = "weir", name = "TestOutputTopic")]
pub struct TestOutputTopic {
    driver: Py<TopologyTestDriver>,
    topic: String,
    key: Serde,
    value: Serde,
}

impl TestOutputTopic {
    fn read(&self, py: Python<'_>) -> PyResult<Vec<ProducedRecord>> {
        let mut driver = self.driver.borrow_mut(py);
        Ok(driver.driver()?.read_raw(&self.topic))
    }

    fn decode<'py>(
        &self,
        py: Python<'py>,
        r: &ProducedRecord,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let key = self.key.decode(py, r.key.as_deref()).map_err(|e| {
            PyValueError::new_err(format!("{}: key: {}", self.topic, describe(py, &e)))
        })?;
        let value = self.value.decode(py, r.value.as_deref()).map_err(|e| {
            PyValueError::new_err(format!("{}: value: {}", self.topic, describe(py, &e)))
        })?;
        Ok((key, value))
    }
}

#[pymethods]
impl TestOutputTopic {
    /// The unread records as `(key, value)` pairs, in order (consumed).
    fn read_key_values_to_list<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        self.read(py)?.iter().map(|r| self.decode(py, r)).collect()
    }

    /// The unread records as a dict of the latest value per key (consumed);
    /// keys must be hashable.
    fn read_key_values_to_map<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let map = PyDict::new(py);
        for r in self.read(py)? {
            let (k, v) = self.decode(py, &r)?;
            map.set_item(k, v)?;
        }
        Ok(map)
    }

    /// The unread records as `(key, value, timestamp, headers)` (consumed);
    /// `headers` is a list of `(name, bytes or None)`, in order.
    #[allow(clippy::type_complexity)]
    fn read_records_to_list<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<
        Vec<(
            Bound<'py, PyAny>,
            Bound<'py, PyAny>,
            i64,
            Vec<(String, Option<Bound<'py, PyBytes>>)>,
        )>,
    > {
        self.read(py)?
            .iter()
            .map(|r| {
                let headers = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.key.clone(),
                            h.value.as_deref().map(|v| PyBytes::new(py, v)),
                        )
                    })
                    .collect();
                self.decode(py, r)
                    .map(|(k, v)| (k, v, r.timestamp, headers))
            })
            .collect()
    }
}
