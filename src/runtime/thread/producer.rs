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

use std::collections::BTreeMap;
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
    /// How long retriable errors of a commit are retried.
    pub(crate) retry_for: Duration,
}

/// The stream thread's producer and its transaction; see the module docs.
pub(crate) struct StreamsProducer<P: TxnProducer> {
    producer: P,
    state: TxnState,
    factory: ProducerFactory<P>,
    timeouts: ProducerTimeouts,
}

impl<P: TxnProducer> StreamsProducer<P> {
    /// Creates the producer and, when `exactly_once`, initializes its
    /// transactions (fencing a previous producer with the same id).
    pub(crate) fn new(
        mut factory: ProducerFactory<P>,
        exactly_once: bool,
        timeouts: ProducerTimeouts,
    ) -> Result<Self, StreamsError> {
        let producer = factory()?;
        let mut this = StreamsProducer {
            producer,
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
        self.retrying("initializing transactions (fencing older instances)", |p| {
            p.init_transactions(timeout)
        })
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
        self.retrying("flushing the producer", |p| p.flush(timeout))?;
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
        group: Option<&P::Group>,
    ) -> Result<(), StreamsError> {
        match self.state {
            TxnState::InTransaction => {}
            TxnState::NonTransactional | TxnState::Ready => return Ok(()),
            TxnState::AbortPending | TxnState::Defunct => return Err(self.not_usable()),
        }
        let timeout = self.timeouts.call;
        if offsets.count() > 0 {
            let Some(group) = group else {
                return Err(StreamsError::kafka(
                    "reading the consumer group metadata (the thread is not in the group)",
                    KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::UnknownMemberId),
                ));
            };
            self.retrying("sending offsets to the transaction", |p| {
                p.send_offsets_to_transaction(offsets, group, timeout)
            })?;
        }
        self.retrying("committing the transaction", |p| {
            p.commit_transaction(timeout)
        })?;
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
        match self.producer.abort_transaction(self.timeouts.call) {
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
            "replacing the fenced producer"
        );
        self.producer = (self.factory)()?;
        self.state = TxnState::Ready;
        if let Err(e) = self.init() {
            self.state = TxnState::Defunct;
            return Err(e);
        }
        Ok(())
    }

    /// Runs `call` until it succeeds, fails with an error that is not
    /// retriable, or [`ProducerTimeouts::retry_for`] has passed.
    fn retrying(
        &mut self,
        context: &str,
        call: impl Fn(&P) -> Result<(), KafkaError>,
    ) -> Result<(), StreamsError> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(50);
        loop {
            let error = match call(&self.producer) {
                Ok(()) => return Ok(()),
                Err(e) => self.error(context, e),
            };
            if error.recovery() != Recovery::Retry {
                return Err(error);
            }
            if started.elapsed() >= self.timeouts.retry_for {
                return Err(StreamsError::Timeout {
                    context: format!("{context} (last error: {error})"),
                    after: started.elapsed(),
                });
            }
            tracing::warn!(error = %error, "retrying");
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
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
