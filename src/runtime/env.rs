//! What every stream thread (and the standby thread) of an instance shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::StateCell;
use super::buffer::BufferStats;
use super::purge::Purger;
use super::standby::StandbyRegistry;
use super::stores::InstanceState;
use super::topics::TopicLayout;
use crate::config::StreamsConfig;
use crate::metrics::Metrics;
use crate::processor::TaskConfig;
use crate::topology::Topology;

/// What every thread of an instance shares.
pub(crate) struct ThreadEnv {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Arc<Topology>,
    pub(crate) layout: TopicLayout,
    pub(crate) task_config: TaskConfig,
    pub(crate) stores: Arc<InstanceState>,
    pub(crate) state: Arc<StateCell>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Threads currently between a revocation and the end of restoration.
    pub(crate) rebalancing: Arc<AtomicUsize>,
    pub(crate) metrics: Arc<Metrics>,
    /// Input buffer counters of all threads.
    pub(crate) buffer_stats: Arc<BufferStats>,
    /// Deletes consumed records of repartition topics.
    pub(crate) purger: Purger,
    /// Active and standby tasks of this instance.
    pub(crate) standbys: Arc<StandbyRegistry>,
    /// Interactive queries waiting for the stream threads.
    pub(crate) queries: Arc<super::QueryBus>,
    /// Local tasks opened ahead of the assignment (`warm.rs`).
    pub(crate) warm: Arc<super::warm::WarmTasks>,
}
