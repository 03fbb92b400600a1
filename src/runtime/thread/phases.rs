//! The main loop of a stream thread, one function per phase: poll (without
//! the thread's lock: rebalance callbacks run inside it), then, under the
//! lock, recover if due, buffer, process, punctuate and maybe commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, TopicPartitionList};

use super::{RebalanceContext, Shared, StreamThread, ThreadEnv, ThreadState, lock, wall_clock_ms};
use crate::processor::{Headers, InputRecord, TaskId};
use crate::runtime::buffer::{Buffered, Push, TaskBuffers};
use crate::runtime::error::classify_kafka;
use crate::runtime::{Recovery, StreamsError};

/// Records taken from the consumer per poll round at most.
const MAX_BATCH: usize = 1000;
/// Records a task processes per turn of the processing round-robin.
const RECORDS_PER_TURN: usize = 64;
/// How long after an incremental rebalance the fetchers are woken
/// ([`wake_fetchers`]): librdkafka resumes the kept partitions on its own
/// thread within a millisecond of the callback.
const WAKE_FETCHERS_AFTER: Duration = Duration::from_millis(20);
/// The longest poll while a task waits for records to be fetched.
const FETCH_WAIT_POLL: Duration = Duration::from_millis(10);
/// How often the same transient polling error is logged at most.
const POLL_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// What the loop keeps between iterations besides the thread.
struct LoopState<'c> {
    buffers: TaskBuffers<BorrowedMessage<'c>>,
    /// The generation the buffers were filled under.
    buffered_generation: u64,
    /// The assignment version the buffers were set up for.
    buffered_version: u64,
    batch: Vec<BorrowedMessage<'c>>,
    /// Tasks with buffered records, refilled each iteration.
    ready: Vec<TaskId>,
    last_commit: Instant,
    /// When the last poll round started.
    poll_started: Instant,
    polling_errors: PollErrors,
    /// When to wake the fetchers after an incremental rebalance
    /// ([`wake_fetchers`]).
    wake_fetchers_at: Option<Instant>,
}

/// Transient polling errors, logged at most once per interval.
#[derive(Default)]
struct PollErrors {
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl PollErrors {
    fn note(&mut self, thread: usize, error: &KafkaError) {
        let due = self
            .last_logged
            .is_none_or(|t| t.elapsed() >= POLL_ERROR_LOG_INTERVAL);
        if due {
            tracing::warn!(thread, %error, suppressed = self.suppressed, "polling: transient error (the broker may be restarting); going on");
            self.last_logged = Some(Instant::now());
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
    }
}

/// Runs the loop until shutdown (`Ok`) or a fatal error.
pub(super) fn main_loop(
    env: &Arc<ThreadEnv>,
    thread: &Shared,
    consumer: &BaseConsumer<RebalanceContext>,
) -> Result<(), StreamsError> {
    let max_idle = Duration::from_millis(env.config.max_task_idle_ms);
    let mut state = LoopState {
        buffers: TaskBuffers::new(env.config.buffered_records_per_partition, max_idle),
        buffered_generation: u64::MAX,
        buffered_version: 0,
        batch: Vec::with_capacity(MAX_BATCH),
        ready: Vec::new(),
        last_commit: Instant::now(),
        poll_started: Instant::now(),
        polling_errors: PollErrors::default(),
        wake_fetchers_at: None,
    };
    while !env.shutdown.load(Ordering::SeqCst) {
        let (generation, index, restoring) = {
            let t = lock(thread);
            (t.generation, t.index, t.tasks.restoring() > 0)
        };
        poll(env, consumer, &mut state, index, restoring)?;
        let mut t = lock(thread);
        t.meter.poll_done(state.poll_started);
        if let Some(e) = t.fatal.take() {
            return Err(e);
        }
        if t.state == ThreadState::Starting {
            t.note_empty_join(consumer);
        }
        if t.state == ThreadState::Recovering {
            state.batch.clear();
            if Instant::now() >= t.retry_at {
                t.recover(consumer)?;
            }
            continue;
        }
        if t.generation != generation {
            // A rebalance happened while polling: the batch belongs to
            // revoked tasks (rdkafka returns from poll after a rebalance).
            state.batch.clear();
        }
        if t.generation != state.buffered_generation {
            // New assignment or a rewind: buffered records are fetched again
            // from the committed offsets.
            reset_buffers(&t, &mut state.buffers, consumer);
            state.buffered_generation = t.generation;
            state.buffered_version = t.assignment_version;
            t.dropped.clear();
        } else if t.assignment_version != state.buffered_version {
            // An incremental rebalance: the kept partitions' records stay.
            let dropped = std::mem::take(&mut t.dropped);
            state.batch.retain(|m| {
                !dropped
                    .iter()
                    .any(|(topic, p)| *p == m.partition() && topic == m.topic())
            });
            update_buffers(&t, &mut state.buffers, consumer, &dropped);
            state.buffered_version = t.assignment_version;
            state.wake_fetchers_at = Some(Instant::now() + WAKE_FETCHERS_AFTER);
        }
        if state
            .wake_fetchers_at
            .is_some_and(|at| Instant::now() >= at)
        {
            state.wake_fetchers_at = None;
            wake_fetchers(consumer, &t.assignment);
        }
        let result = run_phases(env, &mut t, consumer, &mut state);
        if let Err(e) = result {
            t.handle_error(e)?;
        }
        answer_queries(env, &t);
    }
    Ok(())
}

/// Buffer, process, punctuate and maybe commit: the phases that need the
/// thread's lock.
fn run_phases<'c>(
    env: &ThreadEnv,
    t: &mut StreamThread,
    consumer: &'c BaseConsumer<RebalanceContext>,
    state: &mut LoopState<'c>,
) -> Result<(), StreamsError> {
    buffer(env, state);
    let mut lag = super::lag::LagProbe::new(consumer, &t.committed_offsets);
    state
        .buffers
        .refresh_behind(|topic, partition| lag.behind(topic, partition));
    // Processing and punctuation output both need the transaction
    // (beginning one is local to librdkafka until a record is sent).
    t.producer.begin_if_needed()?;
    if state.buffers.len() > 0 {
        process(t, consumer, state)?;
        set_paused(
            consumer,
            &state.buffers.take_drained(&env.buffer_stats),
            false,
        );
    }
    // What the tasks could not take now (they wait for an empty
    // partition) stays buffered; a partition at the bound stops fetching.
    set_paused(consumer, &state.buffers.take_full(&env.buffer_stats), true);
    if t.tasks.restoring() > 0 {
        t.restore_slice()?;
    }
    punctuate(t)?;
    t.meter.batch_done(t.tasks.metrics());
    for task in t.tasks.running() {
        t.meter.nodes_done(task.id(), &task.node_metrics());
    }
    maybe_commit(env, t, consumer, state)
}

/// Answers the interactive queries waiting for this thread. Under
/// exactly-once only when nothing was processed since the last commit, so
/// they read committed state (see `runtime/query.rs`).
fn answer_queries(env: &ThreadEnv, t: &StreamThread) {
    if !t.reads_committed_state() {
        return;
    }
    for pending in env.queries.take(t.index) {
        t.answer_query(pending);
    }
}

/// Polls up to [`MAX_BATCH`] records; transient errors are logged (rate
/// limited) and polling goes on; errors that are not transient are returned.
/// While tasks restore, polling does not wait (the restore slice does).
fn poll<'c>(
    env: &ThreadEnv,
    consumer: &'c BaseConsumer<RebalanceContext>,
    state: &mut LoopState<'c>,
    index: usize,
    restoring: bool,
) -> Result<(), StreamsError> {
    let poll_timeout = Duration::from_millis(env.config.poll_ms);
    let max_idle = Duration::from_millis(env.config.max_task_idle_ms);
    let buffers = &state.buffers;
    // Don't wait when buffered records can be processed right away.
    let fetching = buffers.waiting_for_fetch();
    let timeout = if restoring || (buffers.len() > 0 && !buffers.waiting() && !fetching) {
        Duration::ZERO
    } else if buffers.waiting() {
        poll_timeout.min(max_idle)
    } else if fetching {
        // A poll returns as soon as the fetch delivers; other tasks'
        // records left over from a round cut short by a commit wait this
        // long at most.
        poll_timeout.min(FETCH_WAIT_POLL)
    } else {
        poll_timeout
    };
    state.batch.clear();
    state.poll_started = Instant::now();
    let mut next = consumer.poll(timeout);
    while let Some(polled) = next {
        match polled {
            Ok(message) => state.batch.push(message),
            Err(error)
                if error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) =>
            {
                // A join the broker refuses for good (librdkafka retries it
                // every 2 s, forever): the instance would never start.
                return Err(StreamsError::Config(
                    crate::runtime::clients::refused_session_timeout(&env.config),
                ));
            }
            Err(error) => match classify_kafka(&error, Recovery::Retry) {
                Recovery::Fatal => return Err(StreamsError::kafka("polling", error)),
                _ => state.polling_errors.note(index, &error),
            },
        }
        if state.batch.len() >= MAX_BATCH {
            break;
        }
        next = consumer.poll(Duration::ZERO);
    }
    Ok(())
}

/// Moves the polled batch into the per-partition buffers.
fn buffer(env: &ThreadEnv, state: &mut LoopState<'_>) {
    for message in state.batch.drain(..) {
        // The layout's own copy of the topic name: no allocation per record.
        let Some((topic, &subtopology)) = env
            .layout
            .subtopology_of_topic
            .get_key_value(message.topic())
        else {
            continue;
        };
        let partition = message.partition();
        let id = TaskId {
            subtopology,
            partition,
        };
        if let Push::Again {
            offset,
            expected,
            first: true,
        } = state.buffers.push(id, topic, partition, message)
        {
            // See the invariants of `runtime::buffer`.
            tracing::warn!(
                topic = %topic,
                partition,
                offset,
                expected,
                "the consumer delivered records again that this task took already; dropping them"
            );
        }
    }
}

/// Each task with buffered records drains what it can take now, so buffers
/// fill (and partitions pause) only while a task waits for an empty
/// partition or falls behind a poll round.
fn process(
    t: &mut StreamThread,
    _consumer: &BaseConsumer<RebalanceContext>,
    state: &mut LoopState<'_>,
) -> Result<(), StreamsError> {
    let empty_headers = Headers::new();
    state.buffers.tasks_with_records_into(&mut state.ready);
    let now = Instant::now();
    let StreamThread {
        tasks,
        producer,
        env,
        meter,
        ..
    } = t;
    let mut collector = producer.collector(&env.layout.partitions);
    // Round-robin over the tasks, a few records each, until the buffers are
    // empty or a commit is due: a commit (and, under exactly-once, the
    // output's visibility) never waits for all buffered input.
    let commit_due = state.last_commit + env.config.commit_interval();
    loop {
        let mut took = false;
        for &id in &state.ready {
            if tasks.task(id).is_none() {
                continue;
            }
            for _ in 0..RECORDS_PER_TURN {
                let Some(message) = state.buffers.next(id, now) else {
                    break;
                };
                took = true;
                let owned_headers;
                let headers = match message.headers() {
                    Some(h) if h.count() > 0 => {
                        owned_headers = convert_headers(h);
                        &owned_headers
                    }
                    _ => &empty_headers,
                };
                let input = InputRecord {
                    topic: message.topic(),
                    partition: message.partition(),
                    offset: message.offset(),
                    timestamp: message.timestamp().to_millis().unwrap_or(-1),
                    headers,
                    key: message.key(),
                    value: message.payload(),
                };
                tasks.process(id, &input, &mut collector)?;
                meter.record(id, input.timestamp);
            }
        }
        if !took || Instant::now() >= commit_due {
            return Ok(());
        }
    }
}

/// Fires the wall-clock punctuators that are due.
fn punctuate(t: &mut StreamThread) -> Result<(), StreamsError> {
    let StreamThread {
        tasks,
        producer,
        env,
        ..
    } = t;
    let mut collector = producer.collector(&env.layout.partitions);
    tasks.punctuate(wall_clock_ms(), &mut collector)
}

/// Commits at most once per commit interval. An interval in which nothing
/// was processed does not count: the first records after an idle spell (a
/// restore, a quiet input) are committed as soon as they are processed,
/// not up to an interval later.
fn maybe_commit(
    env: &ThreadEnv,
    t: &mut StreamThread,
    consumer: &BaseConsumer<RebalanceContext>,
    state: &mut LoopState<'_>,
) -> Result<(), StreamsError> {
    if state.last_commit.elapsed() < env.config.commit_interval() {
        return Ok(());
    }
    let started = Instant::now();
    if t.commit(consumer)? {
        state.last_commit = started;
    }
    Ok(())
}

/// The thread's assignment as `(task, topic, partition)`.
fn buffer_assignment(t: &StreamThread) -> impl Iterator<Item = (TaskId, String, i32)> + '_ {
    let layout = &t.env.layout;
    t.assignment.iter().filter_map(|(topic, partition)| {
        let subtopology = *layout.subtopology_of_topic.get(topic)?;
        let id = TaskId {
            subtopology,
            partition: *partition,
        };
        Some((id, topic.clone(), *partition))
    })
}

/// Updates the buffers to an incrementally changed assignment (records of
/// kept partitions stay; those of `dropped` go) and lifts the pauses of
/// the paused partitions whose queues went.
fn update_buffers<M: Buffered>(
    t: &StreamThread,
    buffers: &mut TaskBuffers<M>,
    consumer: &BaseConsumer<RebalanceContext>,
    dropped: &[(String, i32)],
) {
    let gone = buffers.update(buffer_assignment(t), dropped);
    lift_pauses(consumer, &gone);
}

/// Empties the buffers for the thread's current assignment and lifts the
/// pauses of the previous one.
fn reset_buffers<M: Buffered>(
    t: &StreamThread,
    buffers: &mut TaskBuffers<M>,
    consumer: &BaseConsumer<RebalanceContext>,
) {
    let gone = buffers.reset(buffer_assignment(t));
    lift_pauses(consumer, &gone);
}

/// Resumes the partitions whose paused queues went in a reset or an
/// update of the buffers, assigned or not. librdkafka keeps an
/// application's pause through an unassign and a later assign
/// (`rd_kafka_assignment_add` lifts only its own, library pause): a
/// partition paused at the bound, revoked (an assignment lost while
/// recovering) and assigned again after the buffers were rebuilt without
/// it would stay paused under a fresh, unpaused queue and never be fetched
/// again, its tasks' output stopped for good (seen on a 3-broker cluster,
/// `cluster_failover`).
fn lift_pauses<C: ConsumerContext>(consumer: &BaseConsumer<C>, gone: &[(String, i32)]) {
    set_paused(consumer, gone, false);
}

/// Wakes the consumer's broker threads once the partitions kept through
/// an incremental rebalance are fetchable again. librdkafka pauses every
/// assigned partition while a rebalance runs and resumes them after (on its
/// own thread, after the callback returned), but a resume does not wake the
/// broker thread (`rd_kafka_toppar_pause_resume`): with no fetch in flight
/// the kept partitions' next fetch waited out the thread's idle wait (1 s,
/// `rd_kafka_max_block_ms`), and their output stopped for a second at a
/// scale-out (`weir-bench rebalance`). A request to the partitions' leaders
/// (a `ListOffsets` by timestamp, answered from the index) wakes their
/// broker threads, which then fetch the resumed partitions.
fn wake_fetchers(consumer: &BaseConsumer<RebalanceContext>, partitions: &[(String, i32)]) {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in partitions {
        let _ = tpl.add_partition_offset(topic, *partition, rdkafka::Offset::End);
    }
    if tpl.count() == 0 {
        return;
    }
    if let Err(e) = consumer.offsets_for_times(tpl, Duration::from_secs(1)) {
        tracing::debug!(error = %e, "waking the fetchers after a rebalance failed; the kept partitions' fetch may resume up to 1 s late");
    }
}

/// Pauses (or resumes) fetching of `partitions`.
fn set_paused<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[(String, i32)],
    pause: bool,
) {
    if partitions.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in partitions {
        let _ = tpl.add_partition(topic, *partition);
    }
    let result = if pause {
        consumer.pause(&tpl)
    } else {
        consumer.resume(&tpl)
    };
    match result {
        Ok(()) => tracing::debug!(
            ?partitions,
            pause,
            "buffer bound: partitions paused/resumed"
        ),
        Err(e) => {
            tracing::warn!(?partitions, pause, error = %e, "pausing/resuming partitions failed")
        }
    }
}

fn convert_headers(headers: &rdkafka::message::BorrowedHeaders) -> Headers {
    let mut out = Headers::new();
    for header in headers.iter() {
        out.add(header.key, header.value.map(<[u8]>::to_vec));
    }
    out
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use rdkafka::Offset;
    use rdkafka::consumer::DefaultConsumerContext;

    use super::*;
    use crate::runtime::buffer::BufferStats;

    struct Rec;

    impl Buffered for Rec {
        fn timestamp_ms(&self) -> i64 {
            0
        }
    }

    /// The first record `consumer` fetches within `timeout`, if any.
    fn poll_one(consumer: &BaseConsumer<DefaultConsumerContext>, timeout: Duration) -> Option<i64> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                return Some(m.offset());
            }
        }
        None
    }

    /// Needs the real broker (librdkafka's pause flags are the subject):
    /// a partition paused at the buffer bound, revoked, and assigned again
    /// after the buffers were rebuilt without it is fetched again.
    #[test]
    fn a_partition_paused_when_revoked_is_fetched_once_assigned_again() {
        let broker = crate::testing::broker();
        let topic = crate::testing::unique_name("paused-revoked");
        broker.create_topics(&[(&topic, 1)]);
        broker.produce(&topic, (0..10).map(|i| (None::<&[u8]>, format!("r{i}"))));
        let consumer: BaseConsumer<DefaultConsumerContext> = broker
            .client_config()
            .set("group.id", crate::testing::unique_name("paused-revoked"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("creating the consumer");
        let assign = || {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, 0, Offset::Beginning)
                .unwrap();
            consumer.assign(&tpl).expect("assigning");
        };
        let task = TaskId {
            subtopology: 0,
            partition: 0,
        };
        let stats = BufferStats::default();
        let mut buffers: TaskBuffers<Rec> = TaskBuffers::new(1, Duration::ZERO);

        assign();
        lift_pauses(&consumer, &buffers.reset([(task, topic.clone(), 0)]));
        assert_eq!(poll_one(&consumer, Duration::from_secs(20)), Some(0));
        assert_eq!(buffers.push(task, &topic, 0, Rec), Push::Buffered);
        let full = buffers.take_full(&stats);
        assert_eq!(full, vec![(topic.clone(), 0)], "one record fills the bound");
        set_paused(&consumer, &full, true);

        // The assignment is lost and the buffers are rebuilt meanwhile
        // (the thread recovered between the revocation and the assignment).
        consumer.unassign().expect("unassigning");
        lift_pauses(&consumer, &buffers.reset(std::iter::empty()));
        assign();
        lift_pauses(&consumer, &buffers.reset([(task, topic.clone(), 0)]));

        assert_eq!(
            poll_one(&consumer, Duration::from_secs(20)),
            Some(0),
            "the partition assigned again is fetched from the start (it stayed paused)"
        );
    }
}
