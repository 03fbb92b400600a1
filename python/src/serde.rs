//! Serdes for Python keys and values: bytes, str, int (Kafka's 64-bit
//! `LongSerde` and 32-bit `IntegerSerde`), JSON, windowed keys, and a custom
//! serde from two callables.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use weir::serdes::SerdeError;

use crate::value::{Callable, PyObj, describe};

enum Kind {
    Bytes,
    Str,
    Int64,
    Int32,
    Json,
    Custom {
        serializer: Callable,
        deserializer: Callable,
    },
    /// Kafka Streams' `TimeWindowedSerde` (`size_ms`: the inner key's
    /// bytes, then the window start, 8 bytes big-endian) or
    /// `SessionWindowedSerde` (no size: the key, then end and start); the
    /// key as a Python tuple `(key, start_ms, end_ms)`.
    Windowed {
        inner: Serde,
        size_ms: Option<i64>,
    },
}

/// How keys or values of a topic are converted between Python objects and
/// Kafka bytes. `None` is a Kafka null for every serde.
#[pyclass(frozen, module = "weir", name = "Serde")]
#[derive(Clone)]
pub struct Serde {
    kind: Arc<Kind>,
    name: &'static str,
}

impl Serde {
    fn of(kind: Kind, name: &'static str) -> Self {
        Serde {
            kind: Arc::new(kind),
            name,
        }
    }

    pub fn bytes_serde() -> Self {
        Serde::of(Kind::Bytes, "bytes")
    }

    pub fn json_serde() -> Self {
        Serde::of(Kind::Json, "json")
    }

    pub fn int_serde() -> Self {
        Serde::of(Kind::Int64, "int")
    }

    pub fn windowed_serde(inner: &Serde, size_ms: Option<i64>) -> Self {
        Serde::of(
            Kind::Windowed {
                inner: inner.clone(),
                size_ms,
            },
            "windowed",
        )
    }

    /// Whether both encode alike (the same serde object, or the same
    /// built-in format).
    pub fn same(&self, other: &Serde) -> bool {
        Arc::ptr_eq(&self.kind, &other.kind)
            || matches!(
                (&*self.kind, &*other.kind),
                (Kind::Bytes, Kind::Bytes)
                    | (Kind::Str, Kind::Str)
                    | (Kind::Int64, Kind::Int64)
                    | (Kind::Int32, Kind::Int32)
                    | (Kind::Json, Kind::Json)
            )
    }

    /// Appends the encoding of `value` to `out`; `false` for a Kafka null.
    pub fn encode(&self, value: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<bool> {
        if value.is_none() {
            return Ok(false);
        }
        let py = value.py();
        match &*self.kind {
            Kind::Bytes => out.extend_from_slice(value.cast::<PyBytes>()?.as_bytes()),
            Kind::Str => out.extend_from_slice(value.cast::<PyString>()?.to_cow()?.as_bytes()),
            Kind::Int64 => out.extend_from_slice(&value.extract::<i64>()?.to_be_bytes()),
            Kind::Int32 => out.extend_from_slice(&value.extract::<i32>()?.to_be_bytes()),
            Kind::Json => write_json(value, out, 0)?,
            Kind::Custom { serializer, .. } => {
                let bytes = serializer.bind(py).call1((value,))?;
                if bytes.is_none() {
                    return Ok(false);
                }
                out.extend_from_slice(bytes.cast::<PyBytes>()?.as_bytes());
            }
            Kind::Windowed { inner, size_ms } => {
                let (key, start, end): (Bound<'_, PyAny>, i64, i64) = value.extract()?;
                if !inner.encode(&key, out)? {
                    return Err(PyValueError::new_err("a windowed key's key is None"));
                }
                if size_ms.is_none() {
                    out.extend_from_slice(&end.to_be_bytes());
                }
                out.extend_from_slice(&start.to_be_bytes());
            }
        }
        Ok(true)
    }

    /// Decodes `data` (`None`: a Kafka null, decoded as `None`).
    pub fn decode<'py>(&self, py: Python<'py>, data: Option<&[u8]>) -> PyResult<Bound<'py, PyAny>> {
        let Some(data) = data else {
            return Ok(py.None().into_bound(py));
        };
        Ok(match &*self.kind {
            Kind::Bytes => PyBytes::new(py, data).into_any(),
            Kind::Str => {
                let text = std::str::from_utf8(data).map_err(|e| {
                    PyValueError::new_err(format!(
                        "str: bytes are not valid UTF-8 at byte {}",
                        e.valid_up_to()
                    ))
                })?;
                PyString::new(py, text).into_any()
            }
            Kind::Int64 => i64::from_be_bytes(fixed(data, "int")?)
                .into_pyobject(py)?
                .into_any(),
            Kind::Int32 => i32::from_be_bytes(fixed(data, "int32")?)
                .into_pyobject(py)?
                .into_any(),
            Kind::Json => json_loads(py)?.call1((PyBytes::new(py, data),))?,
            Kind::Custom { deserializer, .. } => {
                deserializer.bind(py).call1((PyBytes::new(py, data),))?
            }
            Kind::Windowed { inner, size_ms } => {
                let suffix = if size_ms.is_some() { 8 } else { 16 };
                if data.len() < suffix {
                    return Err(PyValueError::new_err(format!(
                        "windowed key: expected at least {suffix} bytes, got {}",
                        data.len()
                    )));
                }
                let (key, times) = data.split_at(data.len() - suffix);
                let word =
                    |at: usize| i64::from_be_bytes(times[at..at + 8].try_into().expect("8 bytes"));
                let (start, end) = match size_ms {
                    Some(size) => (word(0), word(0).saturating_add(*size)),
                    None => (word(8), word(0)),
                };
                let key = inner.decode(py, Some(key))?;
                PyTuple::new(
                    py,
                    [
                        key,
                        start.into_pyobject(py)?.into_any(),
                        end.into_pyobject(py)?.into_any(),
                    ],
                )?
                .into_any()
            }
        })
    }
}

/// Writes a Python object as JSON (what `json.dumps` accepts: dicts with
/// str keys in their order, lists and tuples, str, int, float, bool, None),
/// compact and in UTF-8 as serde_json writes it (Weir's Rust JSON serde).
fn write_json(value: &Bound<'_, PyAny>, out: &mut Vec<u8>, depth: usize) -> PyResult<()> {
    use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList};
    let text = |out: &mut Vec<u8>, s: &str| {
        serde_json::to_writer(out, s).expect("writing to a Vec cannot fail")
    };
    if depth > 512 {
        return Err(PyValueError::new_err("json: nested more than 512 levels"));
    }
    if value.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(s) = value.cast::<PyString>() {
        text(out, &s.to_cow()?);
    } else if let Ok(b) = value.cast::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if let Ok(i) = value.cast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(n) => out.extend_from_slice(n.to_string().as_bytes()),
            Err(_) => out.extend_from_slice(i.str()?.to_cow()?.as_bytes()),
        }
    } else if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        if !f.is_finite() {
            return Err(PyValueError::new_err(format!(
                "json: {f} is not a JSON number"
            )));
        }
        serde_json::to_writer(&mut *out, &f).expect("writing to a Vec cannot fail");
    } else if let Ok(d) = value.cast::<PyDict>() {
        out.push(b'{');
        for (n, (k, v)) in d.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyValueError::new_err("json: dict keys must be str"))?;
            text(out, &key.to_cow()?);
            out.push(b':');
            write_json(&v, out, depth + 1)?;
        }
        out.push(b'}');
    } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        out.push(b'[');
        for (n, item) in value.try_iter()?.enumerate() {
            if n > 0 {
                out.push(b',');
            }
            write_json(&item?, out, depth + 1)?;
        }
        out.push(b']');
    } else {
        return Err(PyValueError::new_err(format!(
            "json: a {} is not JSON (use dict, list, tuple, str, int, float, bool or None, or a custom serde)",
            value.get_type().name()?
        )));
    }
    Ok(())
}

/// `json.loads` (its C scanner), imported once.
fn json_loads(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static LOADS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    LOADS.import(py, "json", "loads")
}

fn fixed<const N: usize>(data: &[u8], name: &str) -> PyResult<[u8; N]> {
    data.try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "{name}: expected {N} bytes, got {}; is the topic written with a matching serde?",
            data.len()
        ))
    })
}

#[pymethods]
impl Serde {
    /// Raw bytes (`bytes` objects).
    #[staticmethod]
    fn bytes() -> Self {
        Serde::bytes_serde()
    }

    /// UTF-8 text (`str` objects), as Kafka's `StringSerde`.
    #[staticmethod]
    fn str() -> Self {
        Serde::of(Kind::Str, "str")
    }

    /// A 64-bit big-endian integer, as Kafka's `LongSerde` (counts are
    /// written with it).
    #[staticmethod]
    fn int() -> Self {
        Serde::int_serde()
    }

    /// A 32-bit big-endian integer, as Kafka's `IntegerSerde`.
    #[staticmethod]
    fn int32() -> Self {
        Serde::of(Kind::Int32, "int32")
    }

    /// Python objects as compact JSON text (`json.dumps` / `json.loads`).
    #[staticmethod]
    fn json() -> Self {
        Serde::json_serde()
    }

    /// A serde from two callables: `serializer(obj) -> bytes | None` and
    /// `deserializer(bytes) -> obj` (never called for a Kafka null).
    #[staticmethod]
    fn custom(serializer: Bound<'_, PyAny>, deserializer: Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Serde::of(
            Kind::Custom {
                serializer: Callable::new(serializer)?,
                deserializer: Callable::new(deserializer)?,
            },
            "custom",
        ))
    }

    /// Windowed keys `(key, start_ms, end_ms)` of time windows of `size_ms`,
    /// in Kafka Streams' `TimeWindowedSerde` format.
    #[staticmethod]
    fn windowed(inner: &Bound<'_, Serde>, size_ms: i64) -> Self {
        Serde::windowed_serde(inner.get(), Some(size_ms))
    }

    /// Session keys `(key, start_ms, end_ms)`, in Kafka Streams'
    /// `SessionWindowedSerde` format.
    #[staticmethod]
    fn session_windowed(inner: &Bound<'_, Serde>) -> Self {
        Serde::windowed_serde(inner.get(), None)
    }

    /// The bytes of `value` (`None` for a Kafka null).
    fn serialize<'py>(&self, value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut out = Vec::new();
        Ok(self
            .encode(value, &mut out)?
            .then(|| PyBytes::new(value.py(), &out)))
    }

    /// The object encoded in `data` (`None` for a Kafka null).
    #[pyo3(signature = (data))]
    fn deserialize<'py>(
        &self,
        py: Python<'py>,
        data: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.decode(py, data)
    }

    fn __repr__(&self) -> String {
        format!("Serde.{}()", self.name)
    }
}

impl weir::serdes::Serde<PyObj> for Serde {
    fn serialize(&self, topic: &str, data: &PyObj, out: &mut Vec<u8>) -> Result<(), SerdeError> {
        if self.serialize_nullable(topic, data, out)? {
            Ok(())
        } else {
            Err(SerdeError::Null {
                type_name: self.name,
            })
        }
    }

    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<PyObj, SerdeError> {
        self.deserialize_nullable(topic, Some(data))
    }

    fn serialize_nullable(
        &self,
        _topic: &str,
        data: &PyObj,
        out: &mut Vec<u8>,
    ) -> Result<bool, SerdeError> {
        crate::value::attach(|py| {
            self.encode(data.bind(py), out).map_err(|e| {
                SerdeError::Custom(format!("{} serde: {}", self.name, describe(py, &e)))
            })
        })
    }

    fn deserialize_nullable(&self, _topic: &str, data: Option<&[u8]>) -> Result<PyObj, SerdeError> {
        crate::value::attach(|py| {
            self.decode(py, data).map(PyObj::from_bound).map_err(|e| {
                SerdeError::Custom(format!("{} serde: {}", self.name, describe(py, &e)))
            })
        })
    }
}
