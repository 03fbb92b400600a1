//! A real Kafka broker for your integration tests (cargo feature `testing`).
//!
//! The in-memory [`TopologyTestDriver`](crate::driver::TopologyTestDriver)
//! tests a topology's logic; this module tests it the way it runs: against a
//! real broker, with repartition and changelog topics, transactions and
//! `read_committed` consumers. It is the harness Weir's own integration tests
//! use.
//!
//! Enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! weir = { version = "0.1", features = ["testing"] }
//! ```
//!
//! # Which broker
//!
//! [`broker()`] picks one broker per test process, the first that applies:
//!
//! 1. `KAFKA_BOOTSTRAP_SERVERS`, when set: a broker you started (CI, a local
//!    `scripts/kafka start`); an explicit choice wins over a container;
//! 2. a testcontainers `apache/kafka` container, when a Docker engine is
//!    reachable (`DOCKER_HOST` is set or `/var/run/docker.sock` exists): a
//!    single-node KRaft broker configured for transactions (transaction
//!    state log with replication factor 1 and min ISR 1, which the image
//!    needs or transactions never initialize), topic auto-creation off. It
//!    starts once, is shared by every test of the process, and is removed
//!    when the test process exits normally;
//! 3. otherwise [`broker()`] panics and says how to provide one: a test
//!    without a broker fails, it never passes silently.
//!
//! # Helpers
//!
//! Every helper blocks, so it works in a plain `#[test]` (where
//! [`KafkaStreams::start`](crate::runtime::KafkaStreams::start), which also
//! blocks, belongs) and inside an async test alike. Failures panic with a
//! message naming the topic and what failed: in a test a panic is the
//! failure report. Topic names from [`unique_name`] let tests run in
//! parallel against one broker and run again without cleaning up.
//!
//! # Example: a topology's integration test
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use weir::runtime::KafkaStreams;
//! use weir::testing::{self, unique_name};
//! use weir::topology::{Consumed, Produced, StreamsBuilder};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kafka = testing::broker();
//! let (orders, large) = (unique_name("orders"), unique_name("large-orders"));
//! kafka.create_topics(&[(&orders, 2), (&large, 2)]);
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<String, i64>(&orders, Consumed::new())
//!     .filter(|_, amount| *amount >= 100)
//!     .to(&large, Produced::new());
//! let config = kafka.streams_config(&unique_name("large-orders-app"));
//! let mut app = KafkaStreams::new(builder.build()?, config)?;
//! app.start()?;
//!
//! kafka.produce(&orders, [(Some("a"), 5i64.to_be_bytes()), (Some("b"), 250i64.to_be_bytes())]);
//! let out = kafka.wait_for(&large, Duration::from_secs(60), |records| !records.is_empty());
//! assert_eq!(out[0].key.as_deref(), Some(&b"b"[..]));
//! assert!(app.close(Duration::from_secs(30)));
//! # Ok(())
//! # }
//! ```

mod container;
mod records;
mod topics;

pub use crate::runtime::group_describe::GroupMember;
pub use records::{Isolation, ReadRecord};
pub use topics::{group_members, transaction_state_partition};

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use rdkafka::ClientConfig;

use crate::config::StreamsConfig;

/// The variable naming a broker of your own; when set it wins over a container.
pub const BOOTSTRAP_SERVERS_ENV: &str = "KAFKA_BOOTSTRAP_SERVERS";

/// The `apache/kafka` image tag a container runs.
pub const KAFKA_IMAGE_TAG: &str = "4.4.0";

/// Where the broker of a [`TestBroker`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerOrigin {
    /// Named by `KAFKA_BOOTSTRAP_SERVERS`.
    Environment,
    /// A testcontainers `apache/kafka` container started by this process.
    Container,
}

/// The Kafka broker of this test process, with helpers to create topics,
/// produce and read back. Get it with [`broker()`].
#[derive(Debug)]
pub struct TestBroker {
    bootstrap_servers: String,
    origin: BrokerOrigin,
}

/// The broker the tests of this process share, chosen (and, for a container,
/// started) on the first call; see the [module docs](self) for the order.
///
/// # Panics
///
/// When `KAFKA_BOOTSTRAP_SERVERS` is unset and no Docker engine is
/// reachable, or the container does not start.
pub fn broker() -> &'static TestBroker {
    static BROKER: OnceLock<TestBroker> = OnceLock::new();
    BROKER.get_or_init(|| {
        if let Ok(servers) = std::env::var(BOOTSTRAP_SERVERS_ENV)
            && !servers.trim().is_empty()
        {
            return TestBroker {
                bootstrap_servers: servers,
                origin: BrokerOrigin::Environment,
            };
        }
        if container::docker_reachable() {
            return TestBroker {
                bootstrap_servers: container::start(),
                origin: BrokerOrigin::Container,
            };
        }
        panic!(
            "no Kafka broker for the integration tests: set {BOOTSTRAP_SERVERS_ENV} to a broker \
             with transactions enabled (in Weir's repository: `scripts/kafka start`, then \
             `{BOOTSTRAP_SERVERS_ENV}=127.0.0.1:9092 cargo test`, or `scripts/test`, which \
             starts one), or make a Docker engine reachable for testcontainers"
        )
    })
}

/// A name (topic, application id) unique to this test process and call:
/// `<prefix>-<pid>-<counter>-<nanos>`.
///
/// ```
/// let (a, b) = (weir::testing::unique_name("in"), weir::testing::unique_name("in"));
/// assert!(a.starts_with("in-"));
/// assert_ne!(a, b);
/// ```
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos:08x}", std::process::id())
}

impl TestBroker {
    /// Its bootstrap address (`host:port`).
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// Where it came from.
    pub fn origin(&self) -> BrokerOrigin {
        self.origin
    }

    /// librdkafka settings with `bootstrap.servers` set, for clients of your own.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_servers);
        config
    }

    /// A [`StreamsConfig`] for `application_id` on this broker, its state
    /// directory `weir-testing/<application_id>` under the system's temporary
    /// directory (so instances of different tests never share one; it is
    /// left in place for inspection); every other setting at its default.
    /// Use a [`unique_name`] as the id.
    pub fn streams_config(&self, application_id: &str) -> StreamsConfig {
        let mut config = StreamsConfig::new(application_id, self.bootstrap_servers.as_str());
        config.state_dir = state_dir_for(application_id);
        config
    }
}

fn state_dir_for(application_id: &str) -> PathBuf {
    std::env::temp_dir()
        .join("weir-testing")
        .join(application_id)
}
