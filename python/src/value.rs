//! Python objects as Weir record keys and values.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTracebackMethods;

/// A Python object flowing through a topology. Cloning (a record forwarded
/// to several children) copies the `Arc`, not the object, and needs no GIL;
/// the last drop without the GIL leaves the decref to PyO3's pool.
#[derive(Clone)]
pub struct PyObj(Arc<Py<PyAny>>);

impl PyObj {
    pub fn new(object: Py<PyAny>) -> Self {
        PyObj(Arc::new(object))
    }

    pub fn from_bound(object: Bound<'_, PyAny>) -> Self {
        PyObj::new(object.unbind())
    }

    pub fn bind<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.0.bind(py)
    }

    pub fn none(py: Python<'_>) -> Self {
        PyObj::new(py.None())
    }
}

/// The Python error with its traceback, as the reason of a processing
/// error (the dead-letter header, the log line, the task error).
pub fn describe(py: Python<'_>, error: &PyErr) -> String {
    let traceback = error
        .traceback(py)
        .and_then(|t| t.format().ok())
        .unwrap_or_default();
    format!("{traceback}{error}")
}

/// A Python callable shared by every task that runs its node.
#[derive(Clone)]
pub struct Callable(pub Arc<Py<PyAny>>);

impl Callable {
    pub fn new(f: Bound<'_, PyAny>) -> PyResult<Self> {
        if !f.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "expected a callable, got {}",
                f.get_type().name()?
            )));
        }
        Ok(Callable(Arc::new(f.unbind())))
    }

    pub fn bind<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.0.bind(py)
    }
}

/// `Python::attach` for Weir's stream threads. The first call on a thread
/// takes one more reference to the thread's Python thread state and keeps
/// it: on a thread Python did not start, every attach would otherwise
/// create a thread state and destroy it again at the end (CPython's
/// `PyGILState_Release` deletes it when its counter drops to 0), which cost
/// more than the call it made. Later attaches only take and give back the
/// GIL.
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    thread_local! {
        static KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    Python::attach(|py| {
        if !KEPT.get() {
            KEPT.set(true);
            // SAFETY: the GIL is held (inside attach), so this Ensure only
            // raises the current thread state's counter (and returns
            // "locked"); the matching Release never comes, so the state
            // lives as long as the thread.
            unsafe {
                pyo3::ffi::PyGILState_Ensure();
            }
        }
        f(py)
    })
}
