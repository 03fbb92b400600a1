//! Logging setup for the `weir` binary and applications.
//!
//! `WEIR_LOG` takes a `tracing` filter (default `info`); `WEIR_LOG_FORMAT=json`
//! switches from human-readable lines to one JSON object per event. Logs go
//! to standard error.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls do nothing.
pub fn init_logging() {
    let filter = EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("WEIR_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
