//! Application configuration: one typed struct, loaded from `key = value`
//! pairs (a file, `WEIR_*` environment variables, command-line flags), with
//! librdkafka options passed through untouched.
//!
//! Keys are Kafka Streams' names with `_` (`application_id`,
//! `commit_interval_ms`, …). librdkafka settings are given with a prefix and
//! reach the client unchanged:
//!
//! | prefix | goes to |
//! | --- | --- |
//! | `kafka.` | every client (consumer, producer, admin): security settings go here |
//! | `consumer.` | the consumers only |
//! | `producer.` | the producers only |
//! | `admin.` | the admin client only |
//!
//! Parameters of the topology itself (for the shipped topologies: topic
//! names) take the `topology.` prefix.
//!
//! Validation happens once, in [`StreamsConfig::validate`], and every error
//! names the key to fix. An unknown key is an error, never ignored — except
//! from the environment: [`Settings`] layers the places settings come from
//! and remembers each key's [`Origin`], so an error also says where the bad
//! key was given (a file, `--set`, or which `WEIR_*` variable). Any program
//! may have `WEIR_*` variables of its own (`WEIR_HOME`), so an unknown key
//! from the environment is logged as a warning and skipped, while an unknown
//! key from a file or `--set` stops start-up.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::handler::ErrorHandling;
use crate::processor::TaskConfig;

mod sources;
pub use sources::{Origin, Settings};

/// The keys of [`StreamsConfig::set`] without a prefix.
const KEYS: &[&str] = &[
    "application_id",
    "bootstrap_servers",
    "instance_id",
    "group_protocol",
    "num_stream_threads",
    "num_standby_replicas",
    "replication_factor",
    "processing_guarantee",
    "commit_interval_ms",
    "state_dir",
    "state_memory_budget_bytes",
    "state_background_commit_writes",
    "cache_max_bytes",
    "buffered_records_per_partition",
    "max_task_idle_ms",
    "repartition_purge_interval_ms",
    "poll_ms",
    "startup_timeout_ms",
    "scaling_headroom_percent",
    "scaling_window_ms",
    "shed_max_lag_ms",
    "shed_policy",
    "shed_topic",
    "deserialization_handler",
    "processing_handler",
    "http_bind",
    "advertised_endpoint",
];

/// The prefixes of passed-through options (librdkafka's and the topology's).
const PREFIXES: &[&str] = &["kafka.", "consumer.", "producer.", "admin.", "topology."];

/// What the application guarantees about its results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessingGuarantee {
    /// Offsets are committed after outputs are flushed: after a crash some
    /// records are processed again (duplicates, never losses).
    AtLeastOnce,
    /// Outputs, changelog writes and input offsets commit in one Kafka
    /// transaction per commit interval (KIP-447, "EOS v2").
    ExactlyOnceV2,
}

impl FromStr for ProcessingGuarantee {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "at_least_once" => Ok(Self::AtLeastOnce),
            "exactly_once_v2" | "exactly_once" => Ok(Self::ExactlyOnceV2),
            other => Err(format!(
                "'{other}' is not a processing guarantee; use at_least_once or exactly_once_v2"
            )),
        }
    }
}

impl fmt::Display for ProcessingGuarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AtLeastOnce => "at_least_once",
            Self::ExactlyOnceV2 => "exactly_once_v2",
        })
    }
}

/// Which consumer group protocol the stream threads' consumers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    /// KIP-848's `consumer` protocol where the broker offers it (Kafka 4.0
    /// and later), else `classic`; decided at start-up and logged.
    Auto,
    /// KIP-848 (`group.protocol=consumer`): incremental rebalances computed
    /// by the broker's `range` assignor; members keep the tasks that do not
    /// move. Needs a broker with the protocol enabled (Kafka 4.0+).
    Consumer,
    /// The classic protocol with librdkafka's eager `range` assignor: every
    /// rebalance revokes every task. For brokers older than 4.0.
    Classic,
}

impl FromStr for GroupProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" | "" => Ok(Self::Auto),
            "consumer" => Ok(Self::Consumer),
            "classic" => Ok(Self::Classic),
            other => Err(format!(
                "'{other}' is not a group protocol; use consumer (Kafka 4.0+), classic, or auto (consumer when the broker offers it)"
            )),
        }
    }
}

impl fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Consumer => "consumer",
            Self::Classic => "classic",
        })
    }
}

/// librdkafka consumer settings the `consumer` group protocol refuses
/// (the broker owns them; `group.remote.assignor` is set by Weir).
const CLASSIC_ONLY_CONSUMER_KEYS: &[&str] = &[
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
];

/// A configuration error. The message names the key, where it was given
/// when that is known, and says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The offending key.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
    /// Where the key was given (set by [`Settings::into_config`]).
    pub origin: Option<Origin>,
}

impl ConfigError {
    pub(crate) fn new(key: &str, message: impl Into<String>) -> Self {
        Self {
            key: key.to_string(),
            message: message.into(),
            origin: None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config key '{}'", self.key)?;
        if let Some(origin) = &self.origin {
            write!(f, " (from {origin})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The configuration of a Weir application.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamsConfig {
    /// Identifies the application: the consumer group id, the prefix of
    /// internal topics and of transactional ids. Required.
    pub application_id: String,
    /// Kafka bootstrap servers, `host:port[,host:port…]`. Required.
    pub bootstrap_servers: String,
    /// This instance's stable identity in the consumer group (static
    /// membership, librdkafka's `group.instance.id`; stream thread `n` uses
    /// `<instance_id>-<n>`). An instance restarted with the same id within
    /// the session timeout gets its tasks back without a rebalance. Unset
    /// by default (dynamic membership). Give every instance its own.
    pub instance_id: Option<String>,
    /// The consumer group protocol (`auto`, `consumer` or `classic`).
    /// Default `auto`: KIP-848's incremental protocol when the broker
    /// offers it.
    pub group_protocol: GroupProtocol,
    /// Stream threads in this instance. Default 1.
    pub num_stream_threads: usize,
    /// Warm copies kept of each stateful task on other instances (standby
    /// replicas). Default 0.
    pub num_standby_replicas: usize,
    /// Replication factor of the internal topics Weir creates (changelogs,
    /// repartition and late-records topics). `None` (the default, `-1` or
    /// empty in settings): the broker's `default.replication.factor`.
    pub replication_factor: Option<i16>,
    /// At-least-once (default, as Kafka Streams) or exactly-once v2.
    pub processing_guarantee: ProcessingGuarantee,
    /// How often tasks commit: at most once per interval, and at once for
    /// the first records processed after an interval without any (a
    /// restore, a quiet input). Default: 100 ms under exactly-once, 30 s
    /// otherwise (Kafka Streams' defaults).
    pub commit_interval_ms: Option<u64>,
    /// Root of the local state: `<state_dir>/<application_id>/<task>/<store>`.
    /// Default `/tmp/weir`.
    pub state_dir: PathBuf,
    /// Memory shared by all RocksDB stores of this instance (block cache and
    /// write buffers), in bytes. Default 128 MiB.
    pub state_memory_budget_bytes: u64,
    /// Whether RocksDB stores write each commit's data on a background
    /// thread once the transaction committed, while the stream thread goes
    /// on (`false`: the stream thread writes it before it continues).
    /// Default true.
    pub state_background_commit_writes: bool,
    /// Per-instance record cache of the aggregations (`count`, `reduce`,
    /// `aggregate`), in bytes: updates of a key within a commit interval
    /// collapse into one downstream and changelog record at commit; 0
    /// disables it. Default 10 MiB (Kafka Streams' `statestore.cache.max.bytes`).
    pub cache_max_bytes: u64,
    /// Records buffered per input partition before it is paused. Default 1000.
    pub buffered_records_per_partition: usize,
    /// How long a task with several input partitions waits for an empty one
    /// before processing the others out of timestamp order, in
    /// milliseconds. Default 0: never wait.
    pub max_task_idle_ms: u64,
    /// How often consumed records of repartition topics are deleted (up to
    /// the committed offsets), in milliseconds. Default 30 000.
    pub repartition_purge_interval_ms: u64,
    /// Longest time a poll waits for records, in milliseconds. Default 100.
    pub poll_ms: u64,
    /// How long start-up keeps retrying a broker it cannot reach (the
    /// cluster metadata) before it fails with a clear error, in ms.
    /// Default 60 000: long enough for a broker restart.
    pub startup_timeout_ms: u64,
    /// Spare capacity the scaling signal ([`crate::metrics::scaling`])
    /// plans for, in percent of the input rate. Default 20.
    pub scaling_headroom_percent: u32,
    /// The window over which the scaling signal measures rates, in ms
    /// (at least 1 000). Default 10 000.
    pub scaling_window_ms: u64,
    /// Load shedding ([`crate::processor::task::shed`]): the bound on a
    /// source record's lag (wall clock − timestamp) above which part of the
    /// input is dropped, in ms. `None` (the default): no shedding.
    pub shed_max_lag_ms: Option<u64>,
    /// Which records are shed first: `sample` (default) or
    /// `priority:<json field>`.
    pub shed_policy: crate::processor::task::shed::ShedPolicy,
    /// A topic shed records are written to, with headers saying why; it
    /// must exist. Default: none (shed records are only counted).
    pub shed_topic: Option<String>,
    /// What to do with records that cannot be deserialized or carry an
    /// invalid timestamp: `log_and_fail` (default), `log_and_continue`, or
    /// `dead_letter:<topic>`.
    pub deserialization_handler: ErrorHandling,
    /// What to do when processing a record fails; same choices.
    pub processing_handler: ErrorHandling,
    /// Where the HTTP server ([`crate::http`]: `/metrics`, `/health/*`,
    /// `/topology`) listens, `ip:port` (port 0 picks a free port); `off`
    /// (`None`, the library default) runs none. `weir run` defaults to
    /// `127.0.0.1:9190`.
    pub http_bind: Option<std::net::SocketAddr>,
    /// `host:port` other instances reach this instance's HTTP server at,
    /// for interactive queries they forward here; by default the address
    /// `http_bind` bound (set it when binding `0.0.0.0` or behind NAT).
    /// Carried in the group consumers' `client.id`, so every instance
    /// reads every endpoint from the group description.
    pub advertised_endpoint: Option<String>,
    /// Parameters of the topology (`topology.` prefix), such as topic names
    /// of a shipped topology; the topology validates them.
    pub topology_params: BTreeMap<String, String>,
    /// librdkafka options for every client (`kafka.` prefix).
    pub client_overrides: BTreeMap<String, String>,
    /// librdkafka options for consumers (`consumer.` prefix).
    pub consumer_overrides: BTreeMap<String, String>,
    /// librdkafka options for producers (`producer.` prefix).
    pub producer_overrides: BTreeMap<String, String>,
    /// librdkafka options for the admin client (`admin.` prefix).
    pub admin_overrides: BTreeMap<String, String>,
}

impl StreamsConfig {
    /// A configuration with defaults for everything but the two required keys.
    ///
    /// ```
    /// use weir::config::{ProcessingGuarantee, StreamsConfig};
    /// let config = StreamsConfig::new("word-count", "127.0.0.1:9092");
    /// assert_eq!(config.processing_guarantee, ProcessingGuarantee::AtLeastOnce);
    /// assert_eq!(config.commit_interval().as_millis(), 30_000);
    /// ```
    pub fn new(application_id: impl Into<String>, bootstrap_servers: impl Into<String>) -> Self {
        Self {
            application_id: application_id.into(),
            bootstrap_servers: bootstrap_servers.into(),
            instance_id: None,
            group_protocol: GroupProtocol::Auto,
            num_stream_threads: 1,
            num_standby_replicas: 0,
            replication_factor: None,
            processing_guarantee: ProcessingGuarantee::AtLeastOnce,
            commit_interval_ms: None,
            state_dir: PathBuf::from("/tmp/weir"),
            state_memory_budget_bytes: 128 << 20,
            state_background_commit_writes: true,
            cache_max_bytes: 10 << 20,
            buffered_records_per_partition: 1000,
            max_task_idle_ms: 0,
            repartition_purge_interval_ms: 30_000,
            poll_ms: 100,
            startup_timeout_ms: 60_000,
            scaling_headroom_percent: 20,
            scaling_window_ms: 10_000,
            shed_max_lag_ms: None,
            shed_policy: crate::processor::task::shed::ShedPolicy::Sample,
            shed_topic: None,
            deserialization_handler: ErrorHandling::LogAndFail,
            processing_handler: ErrorHandling::LogAndFail,
            http_bind: None,
            advertised_endpoint: None,
            topology_params: BTreeMap::new(),
            client_overrides: BTreeMap::new(),
            consumer_overrides: BTreeMap::new(),
            producer_overrides: BTreeMap::new(),
            admin_overrides: BTreeMap::new(),
        }
    }

    /// Builds a configuration from `key = value` pairs (later pairs win) and
    /// validates it.
    ///
    /// ```
    /// use weir::config::StreamsConfig;
    /// let config = StreamsConfig::from_pairs([
    ///     ("application_id", "word-count"),
    ///     ("bootstrap_servers", "127.0.0.1:9092"),
    ///     ("processing_guarantee", "exactly_once_v2"),
    ///     ("kafka.security.protocol", "plaintext"),
    /// ])
    /// .unwrap();
    /// assert_eq!(config.commit_interval().as_millis(), 100);
    /// let err = StreamsConfig::from_pairs([("num_threads", "2")]).unwrap_err();
    /// assert_eq!(err.key, "num_threads");
    /// ```
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Result<Self, ConfigError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut config = Self::new("", "");
        for (key, value) in pairs {
            config.set(key.as_ref(), value.as_ref())?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Whether [`set`](Self::set) knows `key` (a Weir key or a prefixed option).
    pub fn is_known_key(key: &str) -> bool {
        KEYS.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
    }

    /// Sets one key. Unknown keys and unparsable values are errors naming the key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let value = value.trim();
        for (prefix, map) in [
            ("kafka.", &mut self.client_overrides),
            ("consumer.", &mut self.consumer_overrides),
            ("producer.", &mut self.producer_overrides),
            ("admin.", &mut self.admin_overrides),
            ("topology.", &mut self.topology_params),
        ] {
            if let Some(rdkafka_key) = key.strip_prefix(prefix) {
                if rdkafka_key.is_empty() {
                    return Err(ConfigError::new(
                        key,
                        "a librdkafka option name must follow the prefix",
                    ));
                }
                map.insert(rdkafka_key.to_string(), value.to_string());
                return Ok(());
            }
        }
        match key {
            "application_id" => self.application_id = value.to_string(),
            "bootstrap_servers" => self.bootstrap_servers = value.to_string(),
            "instance_id" => {
                self.instance_id = (!value.is_empty()).then(|| value.to_string());
            }
            "group_protocol" => {
                self.group_protocol = value.parse().map_err(|m| ConfigError::new(key, m))?
            }
            "num_stream_threads" => self.num_stream_threads = parse(key, value)?,
            "num_standby_replicas" => self.num_standby_replicas = parse(key, value)?,
            "replication_factor" => self.replication_factor = parse_replication(key, value)?,
            "processing_guarantee" => {
                self.processing_guarantee = value.parse().map_err(|m| ConfigError::new(key, m))?
            }
            "commit_interval_ms" => self.commit_interval_ms = Some(parse(key, value)?),
            "state_dir" => self.state_dir = PathBuf::from(value),
            "state_memory_budget_bytes" => self.state_memory_budget_bytes = parse(key, value)?,
            "state_background_commit_writes" => {
                self.state_background_commit_writes = parse(key, value)?
            }
            "cache_max_bytes" => self.cache_max_bytes = parse(key, value)?,
            "buffered_records_per_partition" => {
                self.buffered_records_per_partition = parse(key, value)?
            }
            "max_task_idle_ms" => self.max_task_idle_ms = parse(key, value)?,
            "repartition_purge_interval_ms" => {
                self.repartition_purge_interval_ms = parse(key, value)?
            }
            "poll_ms" => self.poll_ms = parse(key, value)?,
            "startup_timeout_ms" => self.startup_timeout_ms = parse(key, value)?,
            "scaling_headroom_percent" => self.scaling_headroom_percent = parse(key, value)?,
            "scaling_window_ms" => self.scaling_window_ms = parse(key, value)?,
            "shed_max_lag_ms" => self.shed_max_lag_ms = Some(parse(key, value)?),
            "shed_policy" => self.shed_policy = parse(key, value)?,
            "shed_topic" => self.shed_topic = Some(value.to_string()),
            "deserialization_handler" => self.deserialization_handler = parse_handler(key, value)?,
            "processing_handler" => self.processing_handler = parse_handler(key, value)?,
            "advertised_endpoint" => {
                let valid = value.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty()
                        && port.parse::<u16>().is_ok()
                        && !value.contains(|c: char| c == '@' || c == '/' || c.is_whitespace())
                });
                if !valid {
                    return Err(ConfigError::new(
                        key,
                        format!("'{value}' is not host:port (for example weir-1.example:9190)"),
                    ));
                }
                self.advertised_endpoint = Some(value.to_string());
            }
            "http_bind" => {
                self.http_bind = match value {
                    "off" | "none" | "" => None,
                    _ => Some(value.parse().map_err(|_| {
                        ConfigError::new(
                            key,
                            format!("'{value}' is not ip:port (for example 127.0.0.1:9190 or 0.0.0.0:0); use off to run no HTTP server"),
                        )
                    })?),
                }
            }
            _ => {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "unknown key; Weir keys are {}; librdkafka options take a \
                         kafka./consumer./producer./admin. prefix, topology parameters a topology. prefix",
                        KEYS.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks the whole configuration; the error names the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.application_id.is_empty() {
            return Err(ConfigError::new(
                "application_id",
                "required; name the application",
            ));
        }
        if !self
            .application_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(ConfigError::new(
                "application_id",
                format!(
                    "'{}' may only contain ASCII letters, digits, '.', '_' and '-' (it prefixes topic names)",
                    self.application_id
                ),
            ));
        }
        if self.bootstrap_servers.is_empty() {
            return Err(ConfigError::new(
                "bootstrap_servers",
                "required; give the Kafka brokers as host:port[,host:port…]",
            ));
        }
        if let Some(id) = &self.instance_id
            && !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(ConfigError::new(
                "instance_id",
                format!("'{id}' may only contain ASCII letters, digits, '.', '_' and '-'"),
            ));
        }
        if self.num_stream_threads == 0 {
            return Err(ConfigError::new("num_stream_threads", "must be at least 1"));
        }
        if self.commit_interval_ms == Some(0) {
            return Err(ConfigError::new(
                "commit_interval_ms",
                "must be at least 1 ms",
            ));
        }
        if self.buffered_records_per_partition == 0 {
            return Err(ConfigError::new(
                "buffered_records_per_partition",
                "must be at least 1",
            ));
        }
        if self.shed_max_lag_ms == Some(0) {
            return Err(ConfigError::new("shed_max_lag_ms", "must be at least 1 ms"));
        }
        if self.shed_max_lag_ms.is_none()
            && (self.shed_topic.is_some()
                || self.shed_policy != crate::processor::task::shed::ShedPolicy::Sample)
        {
            let key = if self.shed_topic.is_some() {
                "shed_topic"
            } else {
                "shed_policy"
            };
            return Err(ConfigError::new(
                key,
                "has no effect without shed_max_lag_ms; set shed_max_lag_ms to turn load shedding on",
            ));
        }
        if self.shed_topic.as_deref() == Some("") {
            return Err(ConfigError::new("shed_topic", "must name a topic"));
        }
        if self.scaling_window_ms < 1_000 {
            return Err(ConfigError::new(
                "scaling_window_ms",
                "must be at least 1000 (rates over shorter windows are noise)",
            ));
        }
        for (prefix, map) in [
            ("kafka.", &self.client_overrides),
            ("consumer.", &self.consumer_overrides),
            ("producer.", &self.producer_overrides),
        ] {
            for reserved in [
                "group.id",
                "group.instance.id",
                "transactional.id",
                "enable.auto.commit",
                "isolation.level",
                "group.protocol",
                "group.remote.assignor",
            ] {
                if map.contains_key(reserved) {
                    return Err(ConfigError::new(
                        &format!("{prefix}{reserved}"),
                        "Weir sets this itself from application_id, processing_guarantee and group_protocol; remove it",
                    ));
                }
            }
        }
        if self.group_protocol == GroupProtocol::Consumer
            && let Some(key) = self.classic_only_consumer_key()
        {
            return Err(ConfigError::new(
                &key,
                "not allowed with group_protocol = consumer: the broker sets it \
                 (group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms, \
                 and the range assignor); remove it or use group_protocol = classic",
            ));
        }
        Ok(())
    }

    /// The first consumer setting given (with its `kafka.`/`consumer.`
    /// prefix) that only the classic group protocol takes
    /// ([`CLASSIC_ONLY_CONSUMER_KEYS`]).
    pub(crate) fn classic_only_consumer_key(&self) -> Option<String> {
        [
            ("kafka.", &self.client_overrides),
            ("consumer.", &self.consumer_overrides),
        ]
        .into_iter()
        .find_map(|(prefix, map)| {
            CLASSIC_ONLY_CONSUMER_KEYS
                .iter()
                .find(|k| map.contains_key(**k))
                .map(|k| format!("{prefix}{k}"))
        })
    }

    /// The effective commit interval.
    pub fn commit_interval(&self) -> Duration {
        Duration::from_millis(
            self.commit_interval_ms
                .unwrap_or(match self.processing_guarantee {
                    ProcessingGuarantee::ExactlyOnceV2 => 100,
                    ProcessingGuarantee::AtLeastOnce => 30_000,
                }),
        )
    }

    /// The per-task settings derived from this configuration.
    pub fn task_config(&self) -> TaskConfig {
        let mut task = TaskConfig::new(self.application_id.clone());
        task.deserialization_handler = self.deserialization_handler.clone();
        task.processing_handler = self.processing_handler.clone();
        task.cache = std::sync::Arc::new(crate::state::CacheBudget::new(self.cache_max_bytes));
        task.shedding =
            self.shed_max_lag_ms
                .map(|max_lag_ms| crate::processor::task::shed::Shedding {
                    max_lag_ms: max_lag_ms as i64,
                    policy: self.shed_policy.clone(),
                    topic: self.shed_topic.clone(),
                });
        task
    }

    /// Whether results are exactly-once.
    pub fn is_exactly_once(&self) -> bool {
        self.processing_guarantee == ProcessingGuarantee::ExactlyOnceV2
    }
}

fn parse_handler(key: &str, value: &str) -> Result<ErrorHandling, ConfigError> {
    value.parse().map_err(|e: String| ConfigError::new(key, e))
}

/// Where the clients of a `weir` tool (`generate`, `table`, `query`,
/// `reset`) connect: the bootstrap servers and librdkafka options for
/// every client they build (TLS, SASL: `--kafka security.protocol=SASL_SSL`
/// …), as `weir run` takes them with the `kafka.` prefix.
///
/// ```
/// let c = weir::config::Connection::with_options(
///     "127.0.0.1:9094",
///     &["security.protocol=SASL_SSL".to_string(), "kafka.sasl.mechanism=SCRAM-SHA-512".to_string()],
/// )
/// .unwrap();
/// let client = c.client_config();
/// assert_eq!(client.get("security.protocol"), Some("SASL_SSL"));
/// assert_eq!(client.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
/// assert!(weir::config::Connection::with_options("x:1", &["nonsense".into()]).is_err());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// `host:port[,host:port…]`.
    pub bootstrap_servers: String,
    /// librdkafka options (without a prefix).
    pub options: BTreeMap<String, String>,
}

impl Connection {
    /// `bootstrap_servers` and options given as `key=value` (a leading
    /// `kafka.` is dropped, so `weir run`'s settings can be reused).
    pub fn with_options(bootstrap_servers: &str, pairs: &[String]) -> Result<Self, ConfigError> {
        let mut options = BTreeMap::new();
        for pair in pairs {
            let (key, value) = pair
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| {
                    ConfigError::new(
                        "--kafka",
                        format!("'{pair}' is not OPTION=VALUE (e.g. security.protocol=SASL_SSL)"),
                    )
                })?;
            let key = key.trim();
            options.insert(
                key.strip_prefix("kafka.").unwrap_or(key).to_string(),
                value.to_string(),
            );
        }
        Ok(Connection {
            bootstrap_servers: bootstrap_servers.to_string(),
            options,
        })
    }

    /// A librdkafka configuration with the bootstrap servers and the options.
    pub fn client_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers);
        for (k, v) in &self.options {
            c.set(k, v);
        }
        c
    }
}

impl From<&str> for Connection {
    fn from(bootstrap_servers: &str) -> Self {
        Connection {
            bootstrap_servers: bootstrap_servers.to_string(),
            options: BTreeMap::new(),
        }
    }
}

/// A replication factor: `-1` or empty for the broker's default, else 1..=32767.
fn parse_replication(key: &str, value: &str) -> Result<Option<i16>, ConfigError> {
    match value.trim() {
        "" | "-1" => Ok(None),
        v => match v.parse::<i16>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ConfigError::new(
                key,
                format!(
                    "'{value}' is not a replication factor; give a whole number >= 1 \
                     (at most the number of brokers), or -1 for the broker's default"
                ),
            )),
        },
    }
}

fn parse<T: FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: fmt::Display,
{
    value
        .parse()
        .map_err(|e| ConfigError::new(key, format!("'{value}' is not valid here: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_factor_is_the_brokers_unless_given() {
        let mut c = StreamsConfig::new("app", "localhost:9092");
        assert_eq!(c.replication_factor, None);
        c.set("replication_factor", "3").unwrap();
        assert_eq!(c.replication_factor, Some(3));
        c.set("replication_factor", "-1").unwrap();
        assert_eq!(c.replication_factor, None);
        for bad in ["0", "-2", "three", "40000"] {
            let e = c.set("replication_factor", bad).unwrap_err().to_string();
            assert!(
                e.contains("replication_factor") && e.contains("-1 for the broker's default"),
                "{e}"
            );
        }
    }

    #[test]
    fn shedding_is_off_unless_a_bound_is_given_and_its_other_keys_need_one() {
        let c = StreamsConfig::new("app", "localhost:9092");
        assert_eq!(c.task_config().shedding, None);
        let mut c = StreamsConfig::new("app", "localhost:9092");
        c.set("shed_max_lag_ms", "500").unwrap();
        c.set("shed_policy", "priority:level").unwrap();
        c.set("shed_topic", "shed").unwrap();
        c.validate().unwrap();
        let shedding = c.task_config().shedding.unwrap();
        assert_eq!(shedding.max_lag_ms, 500);
        assert_eq!(shedding.topic.as_deref(), Some("shed"));
        let e = c.set("shed_policy", "random").unwrap_err().to_string();
        assert!(
            e.contains("shed_policy") && e.contains("priority:<json field>"),
            "{e}"
        );
        let mut c = StreamsConfig::new("app", "localhost:9092");
        c.set("shed_topic", "shed").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("shed_topic") && e.contains("set shed_max_lag_ms"),
            "{e}"
        );
        c.set("shed_max_lag_ms", "0").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("shed_max_lag_ms"), "{e}");
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            ("application_id", "app"),
            ("bootstrap_servers", "127.0.0.1:9092"),
        ]
    }

    #[test]
    fn defaults_follow_kafka_streams() {
        let c = StreamsConfig::from_pairs(base()).unwrap();
        assert_eq!(c.num_stream_threads, 1);
        assert_eq!(c.commit_interval(), Duration::from_secs(30));
        let mut pairs = base();
        pairs.push(("processing_guarantee", "exactly_once_v2"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap().commit_interval(),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn the_group_protocol_is_auto_unless_set_and_refuses_broker_owned_keys() {
        let c = StreamsConfig::from_pairs(base()).unwrap();
        assert_eq!(c.group_protocol, GroupProtocol::Auto);
        for (value, expected) in [
            ("consumer", GroupProtocol::Consumer),
            ("classic", GroupProtocol::Classic),
            ("auto", GroupProtocol::Auto),
        ] {
            let mut pairs = base();
            pairs.push(("group_protocol", value));
            assert_eq!(
                StreamsConfig::from_pairs(pairs).unwrap().group_protocol,
                expected
            );
        }
        let mut pairs = base();
        pairs.push(("group_protocol", "eager"));
        let err = StreamsConfig::from_pairs(pairs).unwrap_err();
        assert_eq!(err.key, "group_protocol");
        assert!(err.message.contains("consumer"), "{}", err.message);
        // The consumer protocol: the broker owns session and heartbeat timing.
        let mut pairs = base();
        pairs.push(("group_protocol", "consumer"));
        pairs.push(("consumer.session.timeout.ms", "30000"));
        let err = StreamsConfig::from_pairs(pairs).unwrap_err();
        assert_eq!(err.key, "consumer.session.timeout.ms");
        assert!(err.message.contains("group.consumer.session.timeout.ms"));
        // The classic protocol takes it.
        let mut pairs = base();
        pairs.push(("group_protocol", "classic"));
        pairs.push(("consumer.session.timeout.ms", "30000"));
        assert!(StreamsConfig::from_pairs(pairs).is_ok());
        // Weir picks the protocol itself.
        let mut pairs = base();
        pairs.push(("consumer.group.protocol", "consumer"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap_err().key,
            "consumer.group.protocol"
        );
    }

    #[test]
    fn classic_only_settings_are_found_under_either_prefix() {
        let mut config = StreamsConfig::new("app", "127.0.0.1:9092");
        assert_eq!(config.classic_only_consumer_key(), None);
        config
            .consumer_overrides
            .insert("max.poll.interval.ms".into(), "6000".into());
        assert_eq!(config.classic_only_consumer_key(), None);
        config
            .client_overrides
            .insert("heartbeat.interval.ms".into(), "1000".into());
        assert_eq!(
            config.classic_only_consumer_key().as_deref(),
            Some("kafka.heartbeat.interval.ms")
        );
    }

    #[test]
    fn an_instance_id_is_checked_and_optional() {
        let c = StreamsConfig::from_pairs(base()).unwrap();
        assert_eq!(c.instance_id, None);
        let mut pairs = base();
        pairs.push(("instance_id", "orders-1"));
        let c = StreamsConfig::from_pairs(pairs).unwrap();
        assert_eq!(c.instance_id.as_deref(), Some("orders-1"));
        let mut pairs = base();
        pairs.push(("instance_id", "orders 1"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap_err().key,
            "instance_id"
        );
        let mut pairs = base();
        pairs.push(("consumer.group.instance.id", "x"));
        let err = StreamsConfig::from_pairs(pairs).unwrap_err();
        assert_eq!(err.key, "consumer.group.instance.id");
    }

    #[test]
    fn errors_name_the_key() {
        let mut pairs = base();
        pairs.push(("num_stream_threads", "many"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap_err().key,
            "num_stream_threads"
        );
        let mut pairs = base();
        pairs.push(("processing_guarantee", "exactly_twice"));
        let err = StreamsConfig::from_pairs(pairs).unwrap_err();
        assert_eq!(err.key, "processing_guarantee");
        assert!(err.to_string().contains("exactly_once_v2"), "{err}");
        assert_eq!(
            StreamsConfig::from_pairs([("bootstrap_servers", "x:1")])
                .unwrap_err()
                .key,
            "application_id"
        );
        let mut pairs = base();
        pairs.push(("application_id", "bad id"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap_err().key,
            "application_id"
        );
        let mut pairs = base();
        pairs.push(("consumer.group.id", "x"));
        assert_eq!(
            StreamsConfig::from_pairs(pairs).unwrap_err().key,
            "consumer.group.id"
        );
        let mut pairs = base();
        pairs.push(("http_bind", "localhost"));
        let err = StreamsConfig::from_pairs(pairs).unwrap_err();
        assert_eq!(err.key, "http_bind");
        assert!(err.to_string().contains("ip:port"), "{err}");
    }

    #[test]
    fn the_advertised_endpoint_is_host_and_port() {
        for good in ["weir-1:9190", "10.0.0.7:80", "[::1]:9190"] {
            let mut pairs = base();
            pairs.push(("advertised_endpoint", good));
            let c = StreamsConfig::from_pairs(pairs).unwrap();
            assert_eq!(c.advertised_endpoint.as_deref(), Some(good));
        }
        for bad in ["weir-1", ":9190", "host:port", "a@b:1", "a b:1"] {
            let mut pairs = base();
            pairs.push(("advertised_endpoint", bad));
            let err = StreamsConfig::from_pairs(pairs).unwrap_err();
            assert_eq!(err.key, "advertised_endpoint", "{bad}");
        }
    }

    #[test]
    fn http_bind_takes_an_address_or_off() {
        let mut pairs = base();
        pairs.push(("http_bind", "0.0.0.0:0"));
        let c = StreamsConfig::from_pairs(pairs).unwrap();
        assert_eq!(c.http_bind, Some("0.0.0.0:0".parse().unwrap()));
        let mut pairs = base();
        pairs.extend([("http_bind", "127.0.0.1:9190"), ("http_bind", "off")]);
        assert_eq!(StreamsConfig::from_pairs(pairs).unwrap().http_bind, None);
    }

    #[test]
    fn rdkafka_options_pass_through_by_prefix() {
        let mut pairs = base();
        pairs.extend([
            ("kafka.security.protocol", "ssl"),
            ("consumer.fetch.min.bytes", "1"),
            ("producer.linger.ms", "5"),
            ("admin.request.timeout.ms", "1000"),
        ]);
        let c = StreamsConfig::from_pairs(pairs).unwrap();
        assert_eq!(c.client_overrides["security.protocol"], "ssl");
        assert_eq!(c.consumer_overrides["fetch.min.bytes"], "1");
        assert_eq!(c.producer_overrides["linger.ms"], "5");
        assert_eq!(c.admin_overrides["request.timeout.ms"], "1000");
    }
}
