//! The broker side: `scripts/kafka cluster` drives the brokers (kill,
//! restart, pause, resume by node number), and metadata says which broker
//! leads what.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// A cluster started by `scripts/kafka cluster start` on `port`.
pub struct Cluster {
    pub port: u16,
    pub bootstrap: String,
    pub brokers: i32,
}

impl Cluster {
    pub fn attach(port: u16) -> Result<Cluster> {
        let mut cluster = Cluster {
            port,
            bootstrap: String::new(),
            brokers: 0,
        };
        cluster.bootstrap = cluster.script(&["bootstrap"])?;
        cluster.brokers = cluster.bootstrap.split(',').count() as i32;
        if cluster.brokers < 3 {
            bail!(
                "the chaos run needs a cluster of at least 3 brokers (replication 3, min.insync.replicas 2); \
                 found {}",
                cluster.brokers
            );
        }
        Ok(cluster)
    }

    pub fn script(&self, args: &[&str]) -> Result<String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka");
        let out = Command::new(&script)
            .arg("cluster")
            .args(args)
            .env("KAFKA_CLUSTER_PORT", self.port.to_string())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "scripts/kafka cluster {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }

    fn metadata_client(&self) -> Result<BaseConsumer> {
        Ok(ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()?)
    }

    /// The leader of `topic`'s `partition`, once it has one.
    pub fn leader(&self, topic: &str, partition: i32) -> Result<i32> {
        Ok(weir::testing::broker().partition_leader(topic, partition).0)
    }

    /// The transaction coordinator of `transactional_id`.
    pub fn coordinator(&self, transactional_id: &str) -> Result<i32> {
        Ok(weir::testing::broker().transaction_coordinator(transactional_id))
    }

    /// The group coordinator of consumer group `group`.
    pub fn coordinator_of_group(&self, group: &str) -> Result<i32> {
        Ok(weir::testing::broker().group_coordinator(group))
    }

    /// Waits until every partition of every topic has all its replicas in
    /// sync, so that the next broker fault leaves at least
    /// `min.insync.replicas` of each.
    pub fn wait_in_sync(&self, timeout: Duration) -> Result<Duration> {
        let client = self.metadata_client()?;
        let started = Instant::now();
        loop {
            let behind = match client.fetch_metadata(None, Duration::from_secs(5)) {
                Ok(md) => md
                    .topics()
                    .iter()
                    .flat_map(|t| t.partitions())
                    .filter(|p| p.leader() < 0 || p.isr().len() < p.replicas().len())
                    .count(),
                Err(_) => usize::MAX,
            };
            if behind == 0 {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!("partitions still out of sync after {timeout:?}: {behind}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
