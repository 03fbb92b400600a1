//! Weir for Python: the extension module `weir._weir`, Weir's engine
//! (RocksDB state, changelogs, exactly-once, windows, joins, the runtime and
//! its metrics) behind a Python API. `python/weir/__init__.py` re-exports it;
//! `python/README.md` shows it in use.

mod dsl;
mod ops;
mod runtime;
mod serde;
mod testing;
mod value;

use pyo3::prelude::*;

#[pymodule]
mod _weir {
    #[pymodule_export]
    use crate::dsl::{
        BranchedKStream, GlobalKTable, JoinWindows, KGroupedStream, KStream, KTable,
        SessionWindowedKStream, SessionWindows, SlidingWindows, StreamsBuilder,
        TimeWindowedKStream, TimeWindows, Topology,
    };
    #[pymodule_export]
    use crate::runtime::{KafkaStreams, TestInputTopic, TestOutputTopic, TopologyTestDriver};
    #[pymodule_export]
    use crate::serde::Serde;
    #[pymodule_export]
    use crate::testing::TestBroker;

    use pyo3::prelude::*;

    /// Sends Weir's logs to stderr: `WEIR_LOG` takes a `tracing` filter
    /// (default `info`), `WEIR_LOG_FORMAT=json` makes them JSON lines. Later
    /// calls do nothing.
    #[pyfunction]
    fn init_logging() {
        weir::telemetry::init_logging();
    }
}
