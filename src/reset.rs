//! `weir reset`: make an application start over from its inputs' beginning
//! (Kafka's `kafka-streams-application-reset` tool).
//!
//! Steps, in order; the first failure stops the reset:
//!
//! 1. **Refuse while the application runs**: the consumer group
//!    `<application_id>` must have no members (an instance that was killed
//!    leaves the group after `session.timeout.ms`, 10 s in Weir).
//! 2. **Inputs back to the beginning**: the consumer group is deleted with
//!    all its committed offsets, so the next run reads every input from its
//!    earliest offset (Weir's consumers use `auto.offset.reset=earliest`;
//!    an override of that setting changes where the next run starts).
//!    Committed offsets of internal topics go with it.
//! 3. **Internal topics deleted**: every topic named
//!    `<application_id>-<name>-changelog` or `<application_id>-<name>-repartition`;
//!    the reset waits until the broker no longer lists them, so the next
//!    `weir run` can create them again.
//! 4. **Local state removed**: `<state_dir>/<application_id>` on this
//!    machine. Run the reset on every machine that ran an instance, or let
//!    the other machines' stores be found stale at restore (Weir then
//!    stops with an error saying to reset).
//!
//! Output topics are left alone, as Kafka's tool does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Why a reset failed.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// A Kafka request failed.
    #[error("{context}: {source}")]
    Kafka {
        /// What was being done.
        context: String,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// Describing the consumer group failed.
    #[error("{context}: {reason}")]
    Describe {
        /// What was being done.
        context: String,
        /// What librdkafka answered.
        reason: String,
    },
    /// The application still runs.
    #[error(
        "application '{application_id}' still has {} active member(s) in its consumer group ({}); stop every instance (a killed one leaves after the session timeout: 10 s under the classic group protocol, the broker's group.consumer.session.timeout.ms under the consumer protocol) and run the reset again",
        members.len(),
        members.join(", ")
    )]
    ActiveMembers {
        /// The application (and group) id.
        application_id: String,
        /// Client ids of the members.
        members: Vec<String>,
    },
    /// Topic deletion did not finish in time.
    #[error("the broker still lists {0:?} 60 s after deleting them; run the reset again")]
    TopicsRemain(Vec<String>),
    /// The local state directory could not be removed.
    #[error("removing the local state {path}: {source}; remove it by hand")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What a reset did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Whether the consumer group (with its committed offsets) existed and was deleted.
    pub group_deleted: bool,
    /// Internal topics deleted.
    pub deleted_topics: Vec<String>,
    /// The local state directory removed, if it existed.
    pub removed_state_dir: Option<PathBuf>,
}

fn kafka(context: impl Into<String>) -> impl FnOnce(KafkaError) -> ResetError {
    let context = context.into();
    move |source| ResetError::Kafka { context, source }
}

/// Whether `topic` is an internal topic of `application_id`.
pub fn is_internal_topic(application_id: &str, topic: &str) -> bool {
    topic
        .strip_prefix(application_id)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| {
            ["-changelog", "-repartition"]
                .iter()
                .any(|suffix| rest.len() > suffix.len() && rest.ends_with(suffix))
        })
}

/// Resets `application_id` on the cluster `connection` names and removes its
/// local state under `state_dir`; see the module docs.
pub fn reset(
    connection: &crate::config::Connection,
    application_id: &str,
    state_dir: &Path,
) -> Result<ResetReport, ResetError> {
    let timeout = Duration::from_secs(30);
    let mut report = ResetReport::default();
    let bootstrap = &connection.bootstrap_servers;
    let client: BaseConsumer = connection
        .client_config()
        .create()
        .map_err(kafka("creating the metadata client"))?;
    // Under either group protocol (the classic DescribeGroups lists no
    // members of a KIP-848 group).
    let members = crate::runtime::group_describe::describe_group(
        client.client(),
        application_id,
        timeout,
    )
    .map_err(|reason| ResetError::Describe {
        context: format!(
            "describing consumer group '{application_id}' (is the broker at {bootstrap} reachable?)"
        ),
        reason,
    })?;
    if !members.is_empty() {
        return Err(ResetError::ActiveMembers {
            application_id: application_id.to_string(),
            members: members.into_iter().map(|m| m.client_id).collect(),
        });
    }

    let admin: AdminClient<DefaultClientContext> = connection
        .client_config()
        .create()
        .map_err(kafka("creating the admin client"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime");
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = runtime
        .block_on(admin.delete_groups(&[application_id], &options))
        .map_err(kafka(format!("deleting consumer group '{application_id}'")))?;
    for result in results {
        match result {
            Ok(_) => report.group_deleted = true,
            Err((_, RDKafkaErrorCode::GroupIdNotFound)) => {}
            Err((group, code)) => {
                return Err(ResetError::Kafka {
                    context: format!("deleting consumer group '{group}' (its committed offsets)"),
                    source: KafkaError::AdminOp(code),
                });
            }
        }
    }

    let internal = internal_topics(&client, application_id, timeout)?;
    if !internal.is_empty() {
        let names: Vec<&str> = internal.iter().map(String::as_str).collect();
        let results = runtime
            .block_on(admin.delete_topics(&names, &options))
            .map_err(kafka(format!("deleting internal topics {names:?}")))?;
        for result in results {
            match result {
                Ok(topic) => report.deleted_topics.push(topic),
                Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((topic, code)) => {
                    return Err(ResetError::Kafka {
                        context: format!("deleting internal topic '{topic}'"),
                        source: KafkaError::AdminOp(code),
                    });
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = internal_topics(&client, application_id, timeout)?;
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(ResetError::TopicsRemain(left));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    report.deleted_topics.sort();

    let dir = state_dir.join(application_id);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => report.removed_state_dir = Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(ResetError::StateDir { path: dir, source }),
    }
    Ok(report)
}

fn internal_topics(
    client: &BaseConsumer,
    application_id: &str,
    timeout: Duration,
) -> Result<Vec<String>, ResetError> {
    let metadata = client
        .fetch_metadata(None, timeout)
        .map_err(kafka("listing topics"))?;
    Ok(metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|name| is_internal_topic(application_id, name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_are_the_applications_changelogs_and_repartitions() {
        assert!(is_internal_topic("app", "app-counts-changelog"));
        assert!(is_internal_topic("app", "app-counts-repartition"));
        assert!(!is_internal_topic("app", "app-changelog"), "no store name");
        assert!(!is_internal_topic("app", "app2-counts-changelog"));
        assert!(!is_internal_topic("app", "other-app-counts-changelog"));
        assert!(!is_internal_topic("app", "app-counts"));
    }
}
