//! The streams producer: a stream thread's producer, its transaction state
//! and the classification of what it reports (Kafka Streams'
//! `StreamsProducer`).
//!
//! # Transaction states
//!
//! ```text
//!                 begin                 commit (offsets sent)
//!   Ready ─────────────────▶ InTransaction ─────────────────▶ Ready
//!     ▲                          │   │
//!     │            abort ok      │   │ abort failed (broker unreachable)
//!     └──────────────────────────┘   ▼
//!     ▲                          AbortPending ── abort retried ──▶ Ready
//!     │ reset (new producer)         │
//!   Defunct ◀──── fenced / fatal ────┘ (from any state)
//! ```
//!
//! At-least-once uses no transactions: the state stays `NonTransactional`.
//!
//! * A retriable error of `send_offsets_to_transaction` or
//!   `commit_transaction` (a timeout, the coordinator moving) is retried
//!   with the same call until [`RETRY_FOR`] has passed; only then does the
//!   commit fail, and the thread aborts.
//! * A fenced or fatal producer is `Defunct`: no call is made on it until
//!   [`StreamsProducer::reset`] replaced it with a new one (which fences
//!   whatever the old one left open).
//! * The blocking transactional calls (init, send offsets, commit, abort)
//!   run on a helper thread, and the stream thread waits for each at most
//!   its timeout plus [`ProducerTimeouts::abandon_grace`]. librdkafka does
//!   not always honour their timeouts: `send_offsets_to_transaction` waits
//!   without a deadline for its group-coordinator request (librdkafka
//!   issue #5456: the coordinator request's timeout is never checked; it
//!   moves on only when some broker connection goes up or down), and after
//!   a transaction coordinator was killed it was seen to hang until the
//!   group expelled the thread, and on. A call
//!   that does not return in time leaves the producer `Defunct` and
//!   abandoned: the helper thread keeps it until the call returns (it may
//!   never), and the replacement fences it. Its open transaction is
//!   aborted by the replacement's `init_transactions` (or the
//!   coordinator's transaction timeout), so nothing it wrote is committed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::error::KafkaError;

use super::client::TxnProducer;
use crate::runtime::error::classify_kafka;
use crate::runtime::{Recovery, StreamsError};

/// How long a retriable transaction error is retried before the commit fails.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(120);
/// The longest pause between two tries of a retriable call.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Where the producer's transaction is; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxnState {
    /// At-least-once: no transactions.
    NonTransactional,
    /// No transaction open.
    Ready,
    /// A transaction is open; records and offsets may be in it.
    InTransaction,
    /// An abort did not finish; it is retried before anything else.
    AbortPending,
    /// Fenced or failed fatally: must be replaced before use.
    Defunct,
}

/// Creates the thread's producer (again, after fencing).
pub(crate) type ProducerFactory<P> = Box<dyn FnMut() -> Result<P, StreamsError> + Send>;

/// Settings of the streams producer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProducerTimeouts {
    /// Timeout of one transactional or flush call.
    pub(crate) call: Duration,
    /// Timeout of `send_offsets_to_transaction`: librdkafka caps it at the
    /// transaction timeout (`transaction.timeout.ms`).
    pub(crate) send_offsets: Duration,
    /// How long retriable errors of a commit are retried.
    pub(crate) retry_for: Duration,
    /// How much longer than its own timeout the stream thread waits for a
    /// transactional call that has not returned before it abandons the
    /// producer (librdkafka should have returned by then).
    pub(crate) abandon_grace: Duration,
    /// How long it waits for one once the application shuts down.
    pub(crate) abandon_on_shutdown: Duration,
}

/// The stream thread's producer and its transaction; see the module docs.
pub(crate) struct StreamsProducer<P: TxnProducer> {
    producer: Arc<P>,
    calls: CallThread,
    shutdown: Arc<AtomicBool>,
    state: TxnState,
    factory: ProducerFactory<P>,
    timeouts: ProducerTimeouts,
}

/// The tries of one retried call: when they began and the next pause.
struct Tries {
    started: Instant,
    backoff: Duration,
}

impl Tries {
    fn new() -> Self {
        Tries {
            started: Instant::now(),
            backoff: Duration::from_millis(50),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The helper thread that makes a producer's blocking transactional calls.
struct CallThread {
    jobs: mpsc::Sender<Job>,
}

impl CallThread {
    fn spawn() -> Result<Self, StreamsError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("weir-txn".to_string())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })
            .map_err(|source| StreamsError::Io {
                context: "starting the producer's transaction thread",
                source,
            })?;
        Ok(CallThread { jobs })
    }

    /// Runs `call` on the helper thread; `None` when `give_up(waited)`
    /// said so before it returned (it goes on running there) or the thread
    /// is gone.
    fn run<R: Send + 'static>(
        &self,
        give_up: impl Fn(Duration) -> bool,
        call: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = done.send(call());
        });
        self.jobs.send(job).ok()?;
        let started = Instant::now();
        loop {
            match result.recv_timeout(Duration::from_millis(100)) {
                Ok(outcome) => return Some(outcome),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) if give_up(started.elapsed()) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

impl<P: TxnProducer> StreamsProducer<P> {
    /// Creates the producer and, when `exactly_once`, initializes its
    /// transactions (fencing a previous producer with the same id).
    /// `shutdown` is the application's shutdown flag: once set, a hung
    /// call is abandoned sooner.
    pub(crate) fn new(
        mut factory: ProducerFactory<P>,
        exactly_once: bool,
        timeouts: ProducerTimeouts,
        shutdown: Arc<AtomicBool>,
    ) -> Result<Self, StreamsError> {
        let producer = Arc::new(factory()?);
        let mut this = StreamsProducer {
            producer,
            calls: CallThread::spawn()?,
            shutdown,
            state: if exactly_once {
                TxnState::Ready
            } else {
                TxnState::NonTransactional
            },
            factory,
            timeouts,
        };
        if exactly_once {
            this.init()?;
        }
        Ok(this)
    }

    fn init(&mut self) -> Result<(), StreamsError> {
        let timeout = self.timeouts.call;
        self.retrying(
            "initializing transactions (fencing older instances)",
            timeout,
            move |p| p.init_transactions(timeout),
        )
    }

    /// The transaction state.
    pub(crate) fn state(&self) -> TxnState {
        self.state
    }

    /// The client (tests reach its delivery bookkeeping through it).
    #[cfg(test)]
    pub(crate) fn client(&self) -> &P {
        &self.producer
    }

    /// A collector that sends task output into the producer.
    pub(crate) fn collector<'a>(
        &'a self,
        partitions: &'a BTreeMap<String, i32>,
    ) -> P::Collector<'a> {
        self.producer.collector(partitions)
    }

    /// The offset of the last delivered record of a changelog partition.
    pub(crate) fn changelog_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.producer.events().changelog_offset(topic, partition)
    }

    /// Begins a transaction unless one is open (exactly-once only).
    pub(crate) fn begin_if_needed(&mut self) -> Result<(), StreamsError> {
        match self.state {
            TxnState::NonTransactional | TxnState::InTransaction => Ok(()),
            TxnState::Ready => {
                self.producer
                    .begin_transaction()
                    .map_err(|e| self.error("beginning a transaction", e))?;
                self.state = TxnState::InTransaction;
                Ok(())
            }
            TxnState::AbortPending | TxnState::Defunct => Err(self.not_usable()),
        }
    }

    /// Waits until every record sent so far is delivered; fails with the
    /// first delivery error since the last commit.
    pub(crate) fn flush(&mut self) -> Result<(), StreamsError> {
        if matches!(self.state, TxnState::AbortPending | TxnState::Defunct) {
            return Err(self.not_usable());
        }
        let timeout = self.timeouts.call;
        let mut tries = Tries::new();
        loop {
            match self.producer.flush(timeout) {
                Ok(()) => break,
                Err(e) => self.retry_or_fail("flushing the producer", e, &mut tries)?,
            }
        }
        match self.producer.events().take_error() {
            Some(error) => Err(StreamsError::kafka("delivering records", error)),
            None => Ok(()),
        }
    }

    /// Sends `offsets` with `group` and commits the open transaction;
    /// retriable errors are retried (module docs). Without an open
    /// transaction there is nothing to commit.
    pub(crate) fn commit_transaction(
        &mut self,
        offsets: &TopicPartitionList,
        group: Option<P::Group>,
    ) -> Result<(), StreamsError> {
        match self.state {
            TxnState::InTransaction => {}
            TxnState::NonTransactional | TxnState::Ready => return Ok(()),
            TxnState::AbortPending | TxnState::Defunct => return Err(self.not_usable()),
        }
        let (timeout, send_timeout) = (self.timeouts.call, self.timeouts.send_offsets);
        if offsets.count() > 0 {
            let Some(group) = group else {
                return Err(StreamsError::kafka(
                    "reading the consumer group metadata (the thread is not in the group)",
                    KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::UnknownMemberId),
                ));
            };
            let (offsets, group) = (Arc::new(offsets.clone()), Arc::new(group));
            let started = Instant::now();
            self.retrying(
                "sending offsets to the transaction",
                send_timeout,
                move |p| p.send_offsets_to_transaction(&offsets, &group, send_timeout),
            )?;
            tracing::trace!(
                elapsed_us = started.elapsed().as_micros() as u64,
                "offsets sent"
            );
        }
        let started = Instant::now();
        self.retrying("committing the transaction", timeout, move |p| {
            p.commit_transaction(timeout)
        })?;
        tracing::trace!(
            elapsed_us = started.elapsed().as_micros() as u64,
            "transaction committed"
        );
        self.state = TxnState::Ready;
        Ok(())
    }

    /// Aborts the open (or pending) transaction, dropping the records in
    /// it. When the abort cannot finish now (broker unreachable) the state
    /// is `AbortPending` and the error says so; call again later.
    pub(crate) fn abort(&mut self) -> Result<(), StreamsError> {
        // A failed delivery belongs to the aborted transaction.
        let _ = self.producer.events().take_error();
        match self.state {
            TxnState::InTransaction | TxnState::AbortPending => {}
            TxnState::NonTransactional | TxnState::Ready | TxnState::Defunct => return Ok(()),
        }
        self.producer.purge();
        let _ = self.producer.events().take_error();
        let timeout = self.timeouts.call;
        let outcome = self.call("aborting the transaction", timeout, move |p| {
            p.abort_transaction(timeout)
        })?;
        match outcome {
            Ok(()) => {
                self.state = TxnState::Ready;
                Ok(())
            }
            Err(e) => {
                let error = self.error("aborting the transaction", e);
                if self.state != TxnState::Defunct {
                    self.state = TxnState::AbortPending;
                }
                Err(error)
            }
        }
    }

    /// Replaces a defunct producer with a new one and initializes its
    /// transactions; does nothing to a usable producer.
    pub(crate) fn reset(&mut self) -> Result<(), StreamsError> {
        if self.state != TxnState::Defunct {
            return Ok(());
        }
        tracing::info!(
            transactional_id = self.producer.transactional_id().unwrap_or(""),
            "replacing the fenced or abandoned producer"
        );
        // A fresh helper thread: the old one may still be inside a call
        // that never returned, holding the old producer.
        self.calls = CallThread::spawn()?;
        self.producer = Arc::new((self.factory)()?);
        self.state = TxnState::Ready;
        if let Err(e) = self.init() {
            self.state = TxnState::Defunct;
            return Err(e);
        }
        Ok(())
    }

    /// Runs the transactional `call` (given `timeout` by librdkafka) until
    /// it succeeds, fails with an error that is not retriable, or
    /// [`ProducerTimeouts::retry_for`] has passed.
    fn retrying(
        &mut self,
        context: &str,
        timeout: Duration,
        call: impl Fn(&P) -> Result<(), KafkaError> + Send + Sync + 'static,
    ) -> Result<(), StreamsError> {
        let call = Arc::new(call);
        let mut tries = Tries::new();
        loop {
            let call = call.clone();
            match self.call(context, timeout, move |p| call(p))? {
                Ok(()) => return Ok(()),
                Err(e) => self.retry_or_fail(context, e, &mut tries)?,
            }
        }
    }

    /// After a failed try: `Ok` after a backoff when the error is
    /// retriable and time is left, else the error.
    fn retry_or_fail(
        &mut self,
        context: &str,
        error: KafkaError,
        tries: &mut Tries,
    ) -> Result<(), StreamsError> {
        let error = self.error(context, error);
        if error.recovery() != Recovery::Retry {
            return Err(error);
        }
        if tries.started.elapsed() >= self.timeouts.retry_for {
            return Err(StreamsError::Timeout {
                context: format!("{context} (last error: {error})"),
                after: tries.started.elapsed(),
            });
        }
        tracing::warn!(error = %error, "retrying");
        std::thread::sleep(tries.backoff);
        tries.backoff = (tries.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }

    /// Makes one transactional call, given `timeout` by librdkafka, on the
    /// helper thread. A call that has not returned [`ProducerTimeouts::abandon_grace`]
    /// after its timeout is left to finish there: the producer is abandoned
    /// (`Defunct`) and the error says so.
    fn call(
        &mut self,
        context: &str,
        timeout: Duration,
        call: impl FnOnce(&P) -> Result<(), KafkaError> + Send + 'static,
    ) -> Result<Result<(), KafkaError>, StreamsError> {
        let producer = self.producer.clone();
        let abandon_after = timeout + self.timeouts.abandon_grace;
        let on_shutdown = self.timeouts.abandon_on_shutdown;
        let shutdown = self.shutdown.clone();
        let give_up = move |waited: Duration| {
            waited >= abandon_after || (waited >= on_shutdown && shutdown.load(Ordering::Relaxed))
        };
        let started = Instant::now();
        match self.calls.run(give_up, move || call(&producer)) {
            Some(outcome) => Ok(outcome),
            None => {
                self.state = TxnState::Defunct;
                tracing::warn!(
                    transactional_id = self.producer.transactional_id().unwrap_or(""),
                    "{context}: librdkafka did not return within {:?}; abandoning the producer",
                    started.elapsed()
                );
                Err(StreamsError::Timeout {
                    context: format!(
                        "{context}: the producer did not return (abandoned; a new one replaces it)"
                    ),
                    after: started.elapsed(),
                })
            }
        }
    }

    /// Classifies a producer error; a fenced or fatal one makes the producer
    /// defunct.
    fn error(&mut self, context: &str, error: KafkaError) -> StreamsError {
        let recovery = classify_kafka(&error, Recovery::AbortAndRewind);
        if matches!(recovery, Recovery::TaskMigrated | Recovery::Fatal) {
            self.state = TxnState::Defunct;
        }
        if recovery == Recovery::TaskMigrated {
            tracing::warn!(%error, "{context}: producer fenced");
            return StreamsError::Fenced {
                transactional_id: self.producer.transactional_id().unwrap_or("").to_string(),
            };
        }
        StreamsError::kafka(context.to_string(), error)
    }

    fn not_usable(&self) -> StreamsError {
        match self.state {
            TxnState::Defunct => StreamsError::Fenced {
                transactional_id: self.producer.transactional_id().unwrap_or("").to_string(),
            },
            _ => StreamsError::kafka(
                "using the producer while an abort is pending",
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::State),
            ),
        }
    }
}
