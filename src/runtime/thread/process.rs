//! The poll → buffer → process → punctuate → commit loop of a stream thread.

use super::*;

pub(super) fn main_loop<'c>(
    env: &Arc<ThreadEnv>,
    core: &Arc<Mutex<Option<Core>>>,
    consumer: &'c BaseConsumer<RebalanceContext>,
) -> Result<(), StreamsError> {
    let poll_timeout = Duration::from_millis(env.config.poll_ms);
    let max_idle = Duration::from_millis(env.config.max_task_idle_ms);
    let commit_interval = env.config.commit_interval();
    let mut last_commit = Instant::now();
    let mut buffers: TaskBuffers<BorrowedMessage<'c>> =
        TaskBuffers::new(env.config.buffered_records_per_partition, max_idle);
    // The generation the buffers were filled under.
    let mut buffered_generation = u64::MAX;
    let mut batch: Vec<BorrowedMessage<'c>> = Vec::with_capacity(MAX_BATCH);
    let empty_headers = Headers::new();
    loop {
        if env.shutdown.load(Ordering::SeqCst) {
            return Ok(());
        }
        let generation = lock_core(core).as_ref().map_or(0, |c| c.generation);
        // Poll without holding the core: rebalance callbacks run in here.
        // Don't wait when buffered records can be processed right away.
        let timeout = if buffers.len() > 0 && !buffers.waiting() {
            Duration::ZERO
        } else if buffers.waiting() {
            poll_timeout.min(max_idle)
        } else {
            poll_timeout
        };
        batch.clear();
        let poll_started = Instant::now();
        if let Some(first) = consumer.poll(timeout) {
            batch.push(first.map_err(|e| StreamsError::kafka("polling", e))?);
            while batch.len() < MAX_BATCH {
                match consumer.poll(Duration::ZERO) {
                    Some(m) => batch.push(m.map_err(|e| StreamsError::kafka("polling", e))?),
                    None => break,
                }
            }
        }
        let mut guard = lock_core(core);
        let c = guard.as_mut().expect("core present");
        c.meter.poll_done(poll_started);
        if let Some(e) = c.fatal.take() {
            return Err(e);
        }
        if c.generation != generation {
            // A rebalance happened while polling: the batch belongs to
            // revoked tasks (rdkafka returns from poll after a rebalance).
            batch.clear();
        }
        if c.generation != buffered_generation {
            // New assignment or a rewind: buffered records are fetched again
            // from the committed offsets.
            reset_buffers(c, &mut buffers, consumer);
            buffered_generation = c.generation;
        }
        for message in batch.drain(..) {
            let Some(&sub) = env.layout.subtopology_of_topic.get(message.topic()) else {
                continue;
            };
            let id = TaskId {
                subtopology: sub,
                partition: message.partition(),
            };
            let (topic, partition) = (message.topic().to_owned(), message.partition());
            buffers.push(id, &topic, partition, message);
        }
        // Processing and punctuation output both need the transaction
        // (beginning one is local to librdkafka until a record is sent).
        if let Err(e) = c.begin_if_needed() {
            match e {
                TxnError::Abort(e) => {
                    c.recover(consumer, &e)?;
                    continue;
                }
                TxnError::Fatal(e) => return Err(e),
            }
        }
        if buffers.len() > 0 {
            let Core {
                tasks,
                producer,
                offsets,
                env: core_env,
                meter,
                dirty,
                ..
            } = &mut *c;
            let mut collector = KafkaCollector {
                producer,
                partitions: &core_env.layout.partitions,
            };
            let ready = buffers.tasks_with_records();
            let now = Instant::now();
            let mut failed = None;
            'tasks: for id in ready {
                let Some(task) = tasks.get_mut(&id) else {
                    continue;
                };
                // A task drains what it can take now, so buffers fill (and
                // partitions pause) only while a task waits for an empty
                // partition or falls behind a poll round.
                loop {
                    let Some(message) = buffers.next(id, now) else {
                        break;
                    };
                    let topic = message.topic();
                    let owned_headers;
                    let headers = match message.headers() {
                        Some(h) if h.count() > 0 => {
                            owned_headers = convert_headers(h);
                            &owned_headers
                        }
                        _ => &empty_headers,
                    };
                    let input = InputRecord {
                        topic,
                        partition: message.partition(),
                        offset: message.offset(),
                        timestamp: message.timestamp().to_millis().unwrap_or(-1),
                        headers,
                        key: message.key(),
                        value: message.payload(),
                    };
                    *dirty = true;
                    if let Err(e) = task.process(&input, &mut collector) {
                        failed = Some(e);
                        break 'tasks;
                    }
                    meter.record(id, input.timestamp);
                    let partitions = match offsets.get_mut(topic) {
                        Some(p) => p,
                        None => offsets.entry(topic.to_string()).or_default(),
                    };
                    partitions.insert(message.partition(), message.offset() + 1);
                }
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
            set_paused(consumer, &buffers.take_drained(&env.buffer_stats), false);
        }
        // What the tasks could not take now (they wait for an empty
        // partition) stays buffered; a partition at the bound stops fetching.
        set_paused(consumer, &buffers.take_full(&env.buffer_stats), true);
        // Wall-clock punctuation.
        let now = wall_clock_ms();
        {
            let Core {
                tasks,
                producer,
                env: core_env,
                ..
            } = c;
            let mut collector = KafkaCollector {
                producer,
                partitions: &core_env.layout.partitions,
            };
            let mut punctuated = false;
            for task in tasks.values_mut() {
                if task.punctuate_wall_clock(now, &mut collector)? > 0 {
                    punctuated = true;
                }
            }
            if punctuated {
                c.dirty = true;
            }
        }
        c.meter
            .batch_done(c.tasks.iter().map(|(id, t)| (id, t.metrics())));
        if last_commit.elapsed() >= commit_interval {
            last_commit = Instant::now();
            match c.commit(consumer) {
                Ok(()) => {}
                Err(TxnError::Abort(e)) => c.recover(consumer, &e)?,
                Err(TxnError::Fatal(e)) => return Err(e),
            }
        }
    }
}

/// Empties the buffers for the core's current assignment and lifts the
/// pauses of the previous one.
fn reset_buffers<M: crate::runtime::buffer::Buffered>(
    core: &Core,
    buffers: &mut TaskBuffers<M>,
    consumer: &BaseConsumer<RebalanceContext>,
) {
    let layout = &core.env.layout;
    let assignment = core.assignment.iter().filter_map(|(topic, partition)| {
        let sub = *layout.subtopology_of_topic.get(topic)?;
        let id = TaskId {
            subtopology: sub,
            partition: *partition,
        };
        Some((id, topic.clone(), *partition))
    });
    let paused = buffers.reset(assignment);
    let assigned: Vec<(String, i32)> = paused
        .into_iter()
        .filter(|p| core.assignment.contains(p))
        .collect();
    set_paused(consumer, &assigned, false);
}

/// Pauses (or resumes) fetching of `partitions`.
fn set_paused(
    consumer: &BaseConsumer<RebalanceContext>,
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
