//! [`KafkaStreams`]: one application instance (Kafka Streams' `KafkaStreams`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::buffer::{BufferStats, BufferStatsSnapshot};
use super::purge::Purger;
use super::standby::{self, StandbyRegistry};
use super::stores::InstanceState;
use super::thread::{self, ThreadEnv};
use super::topics::TopicLayout;
use super::warm::WarmTasks;
use super::{
    AppState, InstanceInfo, KeyValueQuery, QueryBus, QueryError, QueryParts, Router, SessionQuery,
    StateCell, StateListener, StoreService, StreamsError, WindowQuery, topics,
};
use crate::config::{GroupProtocol, StreamsConfig};
use crate::http::{Endpoints, HttpServer};
use crate::metrics::Metrics;
use crate::processor::TaskConfig;
use crate::topology::Topology;

/// A running instance of a Weir application.
///
/// Start as many instances of one `application_id` as the load needs, on one
/// machine or many: they share the input partitions through the consumer
/// group and move tasks (with their state) between them on rebalance.
pub struct KafkaStreams {
    topology: Arc<Topology>,
    config: StreamsConfig,
    task_config: TaskConfig,
    state: Arc<StateCell>,
    shutdown: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    error: Arc<Mutex<Option<Arc<StreamsError>>>>,
    state_dir: Option<Arc<InstanceState>>,
    /// Local tasks opened ahead of the assignment (`warm.rs`).
    warm: Option<Arc<WarmTasks>>,
    metrics: Arc<Metrics>,
    http: Option<HttpServer>,
    buffer_stats: Arc<BufferStats>,
    queries: Arc<QueryBus>,
    router: Arc<Router>,
    /// This instance's standby copies (read by stale queries too).
    standbys: Arc<StandbyRegistry>,
    /// The HTTP server's interactive queries, when it runs.
    store_service: Option<Arc<StoreService>>,
    /// The latest scaling recommendation (`GET /scaling`).
    scaling: Arc<crate::metrics::scaling::ScalingView>,
}

impl KafkaStreams {
    /// An instance of `topology` with `config` (validated here).
    pub fn new(topology: Topology, config: StreamsConfig) -> Result<Self, StreamsError> {
        config.validate()?;
        let task_config = config.task_config();
        let router = Arc::new(Router::new(config.clone(), &topology));
        Ok(KafkaStreams {
            topology: Arc::new(topology),
            task_config,
            state: StateCell::new(),
            shutdown: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            error: Arc::new(Mutex::new(None)),
            state_dir: None,
            warm: None,
            buffer_stats: Arc::new(BufferStats::default()),
            metrics: Arc::new(Metrics::new(&config.application_id)),
            http: None,
            queries: Arc::new(QueryBus::new(config.num_stream_threads)),
            router,
            standbys: Arc::new(StandbyRegistry::default()),
            store_service: None,
            scaling: Arc::default(),
            config,
        })
    }

    /// Calls `listener(old, new)` on every state change.
    pub fn set_state_listener(
        &self,
        listener: impl Fn(AppState, AppState) + Send + Sync + 'static,
    ) {
        let listener: StateListener = Box::new(listener);
        self.state.add_listener(listener);
    }

    /// This instance's metrics (see [`crate::metrics`]).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The current state.
    pub fn state(&self) -> AppState {
        self.state.get()
    }

    /// The fatal error that moved the application to [`AppState::Error`], if any.
    pub fn error(&self) -> Option<Arc<StreamsError>> {
        self.error.lock().expect("error lock").clone()
    }

    /// Counters of the input buffers of all stream threads: how often
    /// partitions were paused because their buffer was full
    /// (`buffered_records_per_partition`) and resumed when it drained.
    pub fn buffer_stats(&self) -> BufferStatsSnapshot {
        self.buffer_stats.snapshot()
    }

    /// Waits until the state satisfies `pred` or `timeout` passes; returns the state.
    pub fn wait_for_state(&self, timeout: Duration, pred: impl Fn(AppState) -> bool) -> AppState {
        self.state.wait_for(timeout, pred)
    }

    /// Checks the topics, creates the internal ones, opens the state
    /// directory and starts the stream threads. Fails with a clear error when
    /// the broker is unreachable, a source topic is missing, co-partitioned
    /// topics differ in partition count, or the state directory is in use.
    pub fn start(&mut self) -> Result<(), StreamsError> {
        if self.state.get() != AppState::Created {
            return Err(StreamsError::IllegalState {
                action: "start",
                state: self.state.get(),
            });
        }
        let state_dir = Arc::new(InstanceState::open(&self.config, self.metrics.clone())?);
        let started = self.start_threads(state_dir);
        if started.is_err()
            && let Some(warm) = self.warm.take()
        {
            warm.close_rest();
        }
        started
    }

    /// [`KafkaStreams::start`] once the state directory is open.
    fn start_threads(&mut self, state_dir: Arc<InstanceState>) -> Result<(), StreamsError> {
        let (layout, purger, group_protocol) = self.prepare_topics()?;
        self.config.group_protocol = group_protocol;
        self.queries
            .set_partitions(layout.tasks_per_subtopology.clone());
        self.router.set_layout(layout.subtopology_of_topic.clone());
        self.start_http()?;
        // Global tables are loaded in full before any stream thread starts.
        let globals = super::global::start(&self.config, &self.topology, self.shutdown.clone())?;
        let mut task_config = self.task_config.clone();
        if let Some(service) = &self.store_service {
            service.set_globals(globals.stores.clone());
        }
        task_config.globals = globals.stores;
        self.threads.extend(globals.thread);
        // The local tasks open while the group is joined (`warm.rs`); they
        // need the global stores, so not before those are loaded.
        let warm = WarmTasks::start(&state_dir, &self.topology, &task_config);
        self.warm = Some(warm.clone());
        let process_id = state_dir.process_id().to_string();
        self.state_dir = Some(state_dir.clone());
        let env = Arc::new(ThreadEnv {
            config: self.config.clone(),
            topology: self.topology.clone(),
            layout,
            task_config,
            stores: state_dir,
            state: self.state.clone(),
            shutdown: self.shutdown.clone(),
            rebalancing: Arc::new(AtomicUsize::new(0)),
            metrics: self.metrics.clone(),
            buffer_stats: self.buffer_stats.clone(),
            purger,
            standbys: self.standbys.clone(),
            queries: self.queries.clone(),
            warm,
        });
        if self.config.num_standby_replicas > 0 {
            self.spawn_standby_thread(&env, &process_id)?;
        }
        self.spawn_scaling_thread(&env)?;
        self.state.transition(AppState::Rebalancing);
        self.spawn_stream_threads(&env, &process_id)
    }

    /// Checks the source topics, plans and creates the internal topics,
    /// starts the purger of repartition topics and settles the group
    /// protocol (`group_protocol = auto` asks the broker).
    fn prepare_topics(&self) -> Result<(TopicLayout, Purger, GroupProtocol), StreamsError> {
        let config = &self.config;
        let metadata = super::clients::metadata_client(config)?;
        let startup_timeout = Duration::from_millis(config.startup_timeout_ms);
        let mut existing = topics::wait_for_cluster(&metadata, startup_timeout)?;
        // A topic created just before the start may not be in the answering
        // broker's metadata yet (seen in a 3-broker chaos run): a missing
        // source topic is asked for again for a few seconds before it fails.
        let asked = Instant::now();
        let layout = loop {
            match topics::plan(&self.topology, &config.application_id, &existing) {
                Err(StreamsError::MissingSourceTopic { topic })
                    if asked.elapsed() < MISSING_SOURCE_GRACE =>
                {
                    tracing::info!(%topic, "source topic not in the cluster metadata yet; asking again");
                    std::thread::sleep(Duration::from_millis(500));
                    existing = topics::wait_for_cluster(&metadata, startup_timeout)?;
                }
                planned => break planned?,
            }
        };
        if let Some(topic) = &config.shed_topic
            && !existing.contains_key(topic)
        {
            return Err(StreamsError::Config(crate::config::ConfigError::new(
                "shed_topic",
                format!("topic '{topic}' does not exist; create it before starting"),
            )));
        }
        let admin = super::clients::admin(config)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| StreamsError::Io {
                context: "creating the runtime for admin requests",
                source,
            })?;
        runtime.block_on(topics::create_internal_topics(
            &admin,
            &metadata,
            &layout,
            &existing,
            config.replication_factor,
        ))?;
        let group_protocol =
            runtime.block_on(super::group_protocol::resolve(config, &admin, &metadata));
        let purger = Purger::start(admin)?;
        Ok((layout, purger, group_protocol))
    }

    /// Starts the HTTP server when `http_bind` is set.
    fn start_http(&mut self) -> Result<(), StreamsError> {
        let Some(bind) = self.config.http_bind else {
            return Ok(());
        };
        let description = self.topology.describe();
        let stores = Arc::new(StoreService::new(
            self.queries.clone(),
            self.router.clone(),
            self.standbys.clone(),
            self.state.clone(),
            &self.topology,
            &self.config.application_id,
        ));
        let endpoints = Endpoints {
            stores: stores.clone(),
            metrics: self.metrics.clone(),
            state: self.state.clone(),
            topology_text: description.to_string(),
            topology_mermaid: description.to_mermaid(),
            topology_json: format!("{}\n", description.to_json()),
            scaling: self.scaling.clone(),
        };
        let server = HttpServer::start(bind, endpoints).map_err(|source| StreamsError::Io {
            context: "starting the HTTP server (http_bind)",
            source,
        })?;
        let bound = server.addr();
        let advertised = match &self.config.advertised_endpoint {
            Some(endpoint) => endpoint.clone(),
            None if bound.ip().is_unspecified() => {
                // Every interface: advertise the one that reaches the
                // broker, which other instances reach too (a container's
                // address in a compose network).
                match local_ip_towards(&self.config.bootstrap_servers) {
                    Some(ip) => std::net::SocketAddr::new(ip, bound.port()).to_string(),
                    None => {
                        tracing::warn!(
                            %bound,
                            "the HTTP server binds every interface and no address towards the broker was found: set advertised_endpoint, or other instances cannot forward queries here"
                        );
                        bound.to_string()
                    }
                }
            }
            None => bound.to_string(),
        };
        tracing::info!(endpoint = %advertised, "advertised endpoint for interactive queries");
        self.config.advertised_endpoint = Some(advertised.clone());
        stores.set_served_by(bound.to_string(), advertised);
        self.http = Some(server);
        self.store_service = Some(stores);
        Ok(())
    }

    /// Starts the scaling signal's sampler ([`crate::metrics::scaling`]).
    fn spawn_scaling_thread(&mut self, env: &Arc<ThreadEnv>) -> Result<(), StreamsError> {
        let inputs = crate::metrics::scaling::ScalingInputs {
            tasks_per_subtopology: env.layout.tasks_per_subtopology.clone(),
            subtopology_of_topic: env.layout.subtopology_of_topic.clone(),
            threads_per_instance: self.config.num_stream_threads,
            headroom_percent: self.config.scaling_headroom_percent,
        };
        let handle = crate::metrics::scaling::start(
            self.metrics.clone(),
            inputs,
            Duration::from_millis(self.config.scaling_window_ms),
            self.scaling.clone(),
            self.shutdown.clone(),
            end_offsets(&self.config)?,
        )
        .map_err(|source| StreamsError::Io {
            context: "spawning the scaling thread",
            source,
        })?;
        self.threads.push(handle);
        Ok(())
    }

    fn spawn_standby_thread(
        &mut self,
        env: &Arc<ThreadEnv>,
        process_id: &str,
    ) -> Result<(), StreamsError> {
        let registry = env.standbys.clone();
        let standby_env = standby::StandbyEnv {
            config: env.config.clone(),
            topology: env.topology.clone(),
            layout: env.layout.clone(),
            task_config: env.task_config.clone(),
            stores: env.stores.clone(),
            metrics: env.metrics.clone(),
            shutdown: env.shutdown.clone(),
            warm: env.warm.clone(),
        };
        let process_id = process_id.to_string();
        let handle = std::thread::Builder::new()
            .name("weir-standby".into())
            .spawn(move || {
                if let Err(e) = standby::run(standby_env, registry, process_id) {
                    tracing::warn!(error = %e, "the standby thread stopped; tasks that move here restore in full");
                }
            })
            .map_err(|source| StreamsError::Io {
                context: "spawning the standby thread",
                source,
            })?;
        self.threads.push(handle);
        Ok(())
    }

    /// Starts `num_stream_threads` stream threads; the first fatal error of
    /// any moves the application to `PendingError`, then `Error` once all
    /// have stopped.
    fn spawn_stream_threads(
        &mut self,
        env: &Arc<ThreadEnv>,
        process_id: &str,
    ) -> Result<(), StreamsError> {
        let alive = Arc::new(AtomicUsize::new(self.config.num_stream_threads));
        for index in 0..self.config.num_stream_threads {
            let env = env.clone();
            let process_id = process_id.to_string();
            let error = self.error.clone();
            let alive = alive.clone();
            let handle = std::thread::Builder::new()
                .name(format!("weir-stream-{index}"))
                .spawn(move || {
                    let result = run_thread(&env, index, &process_id);
                    if let Err(e) = result {
                        tracing::error!(thread = index, error = %e, "stream thread failed");
                        error.lock().expect("error lock").get_or_insert(Arc::new(e));
                        env.state.transition(AppState::PendingError);
                        env.shutdown.store(true, Ordering::SeqCst);
                    }
                    if alive.fetch_sub(1, Ordering::SeqCst) == 1
                        && env.state.get() == AppState::PendingError
                    {
                        env.state.transition(AppState::Error);
                    }
                })
                .map_err(|source| StreamsError::Io {
                    context: "spawning a stream thread",
                    source,
                })?;
            self.threads.push(handle);
        }
        Ok(())
    }

    /// Stops processing: threads commit, close their tasks and leave the
    /// group. Returns `true` when all threads ended within `timeout`.
    pub fn close(&mut self, timeout: Duration) -> bool {
        let was_error = matches!(self.state.get(), AppState::PendingError | AppState::Error);
        if !was_error {
            self.state.transition(AppState::PendingShutdown);
        }
        self.shutdown.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.threads.iter().any(|t| !t.is_finished()) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
        if let Some(warm) = self.warm.take() {
            warm.close_rest();
        }
        if !was_error {
            self.state.transition(AppState::NotRunning);
        }
        self.state_dir = None;
        self.http = None;
        true
    }

    /// The application's instances, with their advertised endpoints,
    /// active tasks and standby tasks, as the consumer group shows them
    /// now (see `runtime/query_route.rs`).
    pub fn instances(&self) -> Result<Vec<InstanceInfo>, QueryError> {
        self.router
            .instances()
            .map(|i| i.as_ref().clone())
            .map_err(|reason| QueryError::Unavailable {
                store: String::new(),
                reason: format!("describing the group: {reason}"),
            })
    }

    /// Read-only access to key-value store `store` of this instance's
    /// active tasks, typed as the topology declared it (`K`/`V` must be
    /// the store's key and value types). Reads go through the stream
    /// threads and see committed state under exactly-once; see
    /// [`KeyValueQuery`].
    ///
    /// ```no_run
    /// # fn f(app: &weir::runtime::KafkaStreams) -> Result<(), weir::runtime::QueryError> {
    /// let counts = app.key_value_store::<String, i64>("counts")?;
    /// let the = counts.get(&"the".to_string())?;
    /// # Ok(()) }
    /// ```
    pub fn key_value_store<K: 'static, V: 'static>(
        &self,
        store: &str,
    ) -> Result<KeyValueQuery<K, V>, QueryError> {
        KeyValueQuery::new(self.query_parts(), store)
    }

    /// Read-only access to window store `store` (see
    /// [`KafkaStreams::key_value_store`]).
    pub fn window_store<K: 'static, V: 'static>(
        &self,
        store: &str,
    ) -> Result<WindowQuery<K, V>, QueryError> {
        WindowQuery::new(self.query_parts(), store)
    }

    /// Read-only access to session store `store` (see
    /// [`KafkaStreams::key_value_store`]).
    pub fn session_store<K: 'static, V: 'static>(
        &self,
        store: &str,
    ) -> Result<SessionQuery<K, V>, QueryError> {
        SessionQuery::new(self.query_parts(), store)
    }

    fn query_parts(&self) -> QueryParts<'_> {
        QueryParts {
            bus: self.queries.clone(),
            router: self.router.clone(),
            state: self.state.clone(),
            standbys: self.standbys.clone(),
            topology: &self.topology,
            application_id: &self.config.application_id,
        }
    }

    /// The address the HTTP server ([`crate::http`]) listens on, once
    /// started; `None` when `http_bind` is off.
    pub fn http_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.as_ref().map(HttpServer::addr)
    }
}

impl Drop for KafkaStreams {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.close(Duration::from_secs(30));
        }
    }
}

/// The local address this machine uses to reach the first of
/// `bootstrap_servers` (a UDP socket is "connected", which sends nothing).
fn local_ip_towards(bootstrap_servers: &str) -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let first = bootstrap_servers.split(',').next()?.trim();
    let target = first.to_socket_addrs().ok()?.next()?;
    let any: std::net::SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let socket = std::net::UdpSocket::bind(any).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// The scaling signal's source of end offsets: the high watermarks of the
/// input partitions, asked of their leaders by a client of its own.
fn end_offsets(
    config: &StreamsConfig,
) -> Result<crate::metrics::scaling::EndOffsets, StreamsError> {
    use rdkafka::consumer::Consumer;
    let client = super::clients::metadata_client(config)?;
    Ok(Box::new(move |partitions: &[(String, i32)]| {
        partitions
            .iter()
            .filter_map(|(topic, partition)| {
                let (_, high) = client
                    .fetch_watermarks(topic, *partition, Duration::from_secs(2))
                    .ok()?;
                Some(((topic.clone(), *partition), high as f64))
            })
            .collect()
    }))
}

/// How long start-up asks again for a source topic missing from the
/// cluster metadata before it fails ([`StreamsError::MissingSourceTopic`]).
const MISSING_SOURCE_GRACE: Duration = Duration::from_secs(5);

/// How often a static member whose instance id is still held asks again.
const UNRELEASED_RETRY: Duration = Duration::from_secs(1);

/// Runs stream thread `index` until shutdown or a fatal error, joining
/// again when the group refuses the thread's static member id because an
/// earlier member still holds it (`UNRELEASED_INSTANCE_ID`). Under KIP-848
/// that is what an instance restarted with the same `instance_id` meets
/// after it was killed: the broker keeps the killed member, which sent no
/// leave, until its session times out (`group.consumer.session.timeout.ms`),
/// and librdkafka makes the refusal a fatal error of the consumer. The
/// thread then starts again with new clients until the id is released;
/// under the classic protocol a restarted static member replaces the old
/// one at once and this never happens.
fn run_thread(env: &Arc<ThreadEnv>, index: usize, process_id: &str) -> Result<(), StreamsError> {
    let mut warned = false;
    loop {
        let result = thread::run(env.clone(), index, process_id);
        let refused = matches!(&result, Err(e) if e.kafka_code()
            == Some(rdkafka::types::RDKafkaErrorCode::UnreleasedInstanceId));
        if !refused || env.shutdown.load(Ordering::SeqCst) {
            return result;
        }
        if !warned {
            tracing::warn!(
                thread = index,
                instance_id = env.config.instance_id.as_deref().unwrap_or(""),
                "the group refused this thread's static member id: an earlier member still holds it (an instance with this instance_id stopped without leaving, e.g. killed, and its session has not timed out yet); joining again every {} s until the broker releases it",
                UNRELEASED_RETRY.as_secs()
            );
            warned = true;
        }
        let until = Instant::now() + UNRELEASED_RETRY;
        while Instant::now() < until && !env.shutdown.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::local_ip_towards;

    #[test]
    fn the_address_towards_a_loopback_broker_is_loopback() {
        assert_eq!(
            local_ip_towards("127.0.0.1:9092,other:9092"),
            Some(std::net::IpAddr::from([127, 0, 0, 1]))
        );
        assert_eq!(local_ip_towards(""), None);
    }
}
