//! The places settings come from, layered: defaults, a file, `WEIR_*`
//! environment variables, `--set` flags; a later place wins for a key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::{ConfigError, StreamsConfig};

/// `WEIR_*` variables that are not settings: logging (see
/// [`crate::telemetry`]) and the scripts' build cache.
const NOT_SETTINGS: &[&str] = &["WEIR_LOG", "WEIR_LOG_FORMAT", "WEIR_CACHE"];

/// Where a setting was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A default of the program.
    Default,
    /// A configuration file.
    File(PathBuf),
    /// An environment variable, by its full name (`WEIR_HOME`).
    Environment(String),
    /// A `--set key=value` flag.
    CommandLine,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("the defaults"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Environment(name) => write!(f, "environment variable {name}"),
            Origin::CommandLine => f.write_str("--set"),
        }
    }
}

/// Settings gathered from several places; a later insert wins for a key.
///
/// ```
/// use weir::config::{Origin, Settings};
///
/// let mut settings = Settings::default();
/// settings.insert("application_id", "app", Origin::Default);
/// settings.insert("bootstrap_servers", "127.0.0.1:9092", Origin::Default);
/// settings.add_environment([("WEIR_HOME".to_string(), "/home/me".to_string())]);
/// // An unknown key from the environment is skipped with a warning…
/// assert!(settings.clone().into_config().is_ok());
/// // …one from --set is an error that says where it came from.
/// settings.insert("num_threads", "2", Origin::CommandLine);
/// let err = settings.into_config().unwrap_err();
/// assert_eq!(err.origin, Some(Origin::CommandLine));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pairs: BTreeMap<String, (String, Origin)>,
}

impl Settings {
    /// Sets `key` to `value`, given at `origin`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>, origin: Origin) {
        self.pairs.insert(key.into(), (value.into(), origin));
    }

    /// Adds the `WEIR_<KEY>` variables of `vars` (pass `std::env::vars()`)
    /// as key `<key>`, lowercased; `WEIR_LOG`, `WEIR_LOG_FORMAT` and
    /// `WEIR_CACHE` are not settings and are left out.
    pub fn add_environment(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in vars {
            if NOT_SETTINGS.contains(&name.as_str()) {
                continue;
            }
            if let Some(key) = name.strip_prefix("WEIR_") {
                let key = key.to_ascii_lowercase();
                self.insert(key, value, Origin::Environment(name));
            }
        }
    }

    /// Builds and validates the configuration. An unknown key from the
    /// environment is logged as a warning and skipped; any other bad key is
    /// an error naming the key and its [`Origin`].
    pub fn into_config(self) -> Result<StreamsConfig, ConfigError> {
        let mut config = StreamsConfig::new("", "");
        for (key, (value, origin)) in &self.pairs {
            if let Origin::Environment(name) = origin
                && !StreamsConfig::is_known_key(key)
            {
                tracing::warn!(
                    variable = %name,
                    "environment variable {name} is not a Weir setting (no key '{key}'); ignored"
                );
                continue;
            }
            config.set(key, value).map_err(|e| ConfigError {
                origin: Some(origin.clone()),
                ..e
            })?;
        }
        config.validate().map_err(|e| {
            let origin = self.pairs.get(&e.key).map(|(_, o)| o.clone());
            ConfigError { origin, ..e }
        })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Settings {
        let mut s = Settings::default();
        s.insert("application_id", "app", Origin::Default);
        s.insert("bootstrap_servers", "127.0.0.1:9092", Origin::Default);
        s
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Log lines written while `f` runs.
    fn logs_of<T>(f: impl FnOnce() -> T) -> (T, String) {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        (out, text)
    }

    #[test]
    fn unknown_environment_keys_are_skipped_with_a_warning() {
        let mut s = base();
        s.add_environment(env(&[
            ("WEIR_HOME", "/home/me"),
            ("WEIR_NUM_STREAM_THREADS", "3"),
            ("WEIR_LOG", "debug"),
            ("HOME", "/root"),
        ]));
        let (config, logs) = logs_of(|| s.into_config());
        let config = config.expect("WEIR_HOME is not an error");
        assert_eq!(config.num_stream_threads, 3, "known keys still apply");
        let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "{logs}");
        assert!(warnings[0].contains("WEIR_HOME"), "{logs}");
    }

    #[test]
    fn unknown_keys_from_a_file_or_set_are_errors_naming_the_origin() {
        let file = PathBuf::from("/etc/weir/app.toml");
        let mut s = base();
        s.insert("home", "/home/me", Origin::File(file.clone()));
        let err = s.into_config().unwrap_err();
        assert_eq!(err.key, "home");
        assert_eq!(err.origin, Some(Origin::File(file)));
        assert!(err.to_string().contains("file /etc/weir/app.toml"), "{err}");

        let mut s = base();
        s.insert("home", "/home/me", Origin::CommandLine);
        let err = s.into_config().unwrap_err();
        assert_eq!(err.origin, Some(Origin::CommandLine));
        assert!(err.to_string().contains("--set"), "{err}");
    }

    #[test]
    fn bad_values_from_the_environment_name_the_variable() {
        let mut s = base();
        s.add_environment(env(&[("WEIR_NUM_STREAM_THREADS", "many")]));
        let err = s.into_config().unwrap_err();
        assert_eq!(err.key, "num_stream_threads");
        assert!(
            err.to_string()
                .contains("environment variable WEIR_NUM_STREAM_THREADS"),
            "{err}"
        );
    }

    #[test]
    fn validation_errors_name_the_origin_of_the_key() {
        let mut s = base();
        s.insert("application_id", "bad id", Origin::CommandLine);
        let err = s.into_config().unwrap_err();
        assert_eq!(err.key, "application_id");
        assert_eq!(err.origin, Some(Origin::CommandLine));
    }

    #[test]
    fn later_places_win() {
        let mut s = base();
        s.insert(
            "num_stream_threads",
            "2",
            Origin::File(PathBuf::from("a.toml")),
        );
        s.add_environment(env(&[("WEIR_NUM_STREAM_THREADS", "3")]));
        s.insert("num_stream_threads", "4", Origin::CommandLine);
        assert_eq!(s.into_config().unwrap().num_stream_threads, 4);
    }
}
