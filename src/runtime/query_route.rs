//! Which instance runs a task, for interactive queries: the application's
//! instances with their endpoints and tasks, read from the consumer group.
//!
//! Every stream thread's consumer carries its instance's process id and
//! advertised endpoint in its `client.id`
//! (`<app>-<process>-<thread>-consumer@<host:port>`). Describing the group
//! (`DescribeConsumerGroups`, which answers under both group protocols)
//! gives each member's client id and current assignment, so any instance
//! knows every instance's endpoint and active tasks with no extra topic
//! or protocol. A crashed instance's entry goes when the group drops its
//! members (the session timeout), as its partitions move. The description
//! is cached for [`CACHE_FOR`]; a forward that fails refreshes it.
//! Standby tasks are computed from the active ones with the same
//! placement the standby threads use.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::StreamsConfig;
use crate::processor::TaskId;
use crate::runtime::end_of_partition::RestoreConsumer;
use crate::topology::Topology;

/// How long a group description is used for routing.
const CACHE_FOR: Duration = Duration::from_secs(1);

/// One instance of the application, as the group shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    /// Its process id (kept in its state directory).
    pub process_id: String,
    /// Its advertised endpoint (`host:port` of its HTTP server), if any.
    pub endpoint: Option<String>,
    /// The active tasks its stream threads run.
    pub tasks: BTreeSet<TaskId>,
    /// The tasks it keeps standby copies of.
    pub standby_tasks: BTreeSet<TaskId>,
}

/// Reads and caches the group's instances.
pub(crate) struct Router {
    config: StreamsConfig,
    subtopology_of_topic: Mutex<HashMap<String, u32>>,
    /// Sub-topologies with logged stores (only they have standbys).
    logged: BTreeSet<u32>,
    client: Mutex<Option<Arc<RestoreConsumer>>>,
    cache: Mutex<Option<(Instant, Arc<Vec<InstanceInfo>>)>>,
}

impl Router {
    pub(crate) fn new(config: StreamsConfig, topology: &Topology) -> Self {
        let logged = topology.logged_subtopologies();
        Router {
            config,
            subtopology_of_topic: Mutex::new(HashMap::new()),
            logged,
            client: Mutex::new(None),
            cache: Mutex::new(None),
        }
    }

    /// Records which sub-topology reads each source topic (at start).
    pub(crate) fn set_layout(&self, subtopology_of_topic: HashMap<String, u32>) {
        *self.subtopology_of_topic.lock().expect("router lock") = subtopology_of_topic;
    }

    /// Forgets the cached description (a forward failed).
    pub(crate) fn invalidate(&self) {
        *self.cache.lock().expect("router lock") = None;
    }

    fn client(&self) -> Result<Arc<RestoreConsumer>, String> {
        let mut client = self.client.lock().expect("router lock");
        if let Some(c) = client.as_ref() {
            return Ok(c.clone());
        }
        let created =
            Arc::new(super::clients::restore_consumer(&self.config).map_err(|e| e.to_string())?);
        *client = Some(created.clone());
        Ok(created)
    }

    /// The application's instances now (cached for [`CACHE_FOR`]).
    pub(crate) fn instances(&self) -> Result<Arc<Vec<InstanceInfo>>, String> {
        if let Some((at, instances)) = self.cache.lock().expect("router lock").as_ref()
            && at.elapsed() < CACHE_FOR
        {
            return Ok(instances.clone());
        }
        let client = self.client()?;
        let app = &self.config.application_id;
        let members = super::group_describe::describe_group(
            rdkafka::consumer::Consumer::client(&*client),
            app,
            Duration::from_secs(5),
        )?;
        let topics = self
            .subtopology_of_topic
            .lock()
            .expect("router lock")
            .clone();
        let by_process = super::group_describe::instances(members, app, &topics);
        let owners = super::standby::logged_owners(&by_process, &self.logged);
        let replicas = self.config.num_standby_replicas;
        let instances = by_process
            .into_iter()
            .map(|(process, instance)| InstanceInfo {
                standby_tasks: if replicas > 0 {
                    super::standby::standby_tasks(&owners, &process, replicas)
                } else {
                    BTreeSet::new()
                },
                process_id: process,
                endpoint: instance.endpoint,
                tasks: instance.tasks,
            })
            .collect::<Vec<_>>();
        let instances = Arc::new(instances);
        *self.cache.lock().expect("router lock") = Some((Instant::now(), instances.clone()));
        Ok(instances)
    }

    /// The end offset (high watermark) of `topic` partition `partition`.
    pub(crate) fn end_offset(&self, topic: &str, partition: i32) -> Result<i64, String> {
        use rdkafka::consumer::Consumer;
        let client = self.client()?;
        client
            .fetch_watermarks(topic, partition, Duration::from_secs(5))
            .map(|(_, high)| high)
            .map_err(|e| e.to_string())
    }

    /// How far a standby copy that applied changelog offset `applied` is
    /// behind the end of `topic` partition `partition`, in offsets (a
    /// transaction marker counts as one); `None` when the end is unknown.
    pub(crate) fn standby_lag(
        &self,
        topic: &str,
        partition: i32,
        applied: Option<i64>,
    ) -> Option<i64> {
        let end = self.end_offset(topic, partition).ok()?;
        Some((end - applied.map_or(0, |a| a + 1)).max(0))
    }

    /// The instance that runs `task`, if any does now.
    pub(crate) fn owner(&self, task: TaskId) -> Result<Option<InstanceInfo>, String> {
        Ok(self
            .instances()?
            .iter()
            .find(|i| i.tasks.contains(&task))
            .cloned())
    }
}
