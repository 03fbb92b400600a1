//! Purging repartition topics: once the records of a repartition topic are
//! consumed and their offsets committed, nobody needs them again, so Weir
//! deletes them (`DeleteRecords` up to the committed offset), as Kafka
//! Streams does every `repartition.purge.interval.ms`.
//!
//! Stream threads hand the offsets they committed to one [`Purger`] per
//! instance; its own thread sends the requests, so a slow broker never
//! stalls processing. Only offsets that are committed are ever sent: under
//! exactly-once, after the transaction carrying them committed.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

use super::StreamsError;

/// Committed offsets of repartition partitions: `(topic, partition) → offset`.
pub(crate) type PurgeOffsets = HashMap<(String, i32), i64>;

/// Sends `DeleteRecords` requests on its own thread. See the module docs.
pub(crate) struct Purger {
    sender: Option<Sender<PurgeOffsets>>,
    thread: Option<JoinHandle<()>>,
}

impl Purger {
    /// Starts the purging thread with its own admin client.
    pub(crate) fn start(admin: AdminClient<DefaultClientContext>) -> Result<Self, StreamsError> {
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("weir-purge".into())
            .spawn(move || run(admin, receiver))
            .map_err(|source| StreamsError::Io {
                context: "spawning the repartition purge thread",
                source,
            })?;
        Ok(Self {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Asks for the records before `offsets` to be deleted.
    pub(crate) fn purge(&self, offsets: PurgeOffsets) {
        if let Some(sender) = &self.sender
            && !offsets.is_empty()
        {
            let _ = sender.send(offsets);
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(admin: AdminClient<DefaultClientContext>, requests: Receiver<PurgeOffsets>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "repartition purging disabled: no runtime");
            return;
        }
    };
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    while let Ok(mut offsets) = requests.recv() {
        // Coalesce what queued up meanwhile: only the latest offset matters.
        while let Ok(more) = requests.try_recv() {
            for (tp, offset) in more {
                let e = offsets.entry(tp).or_insert(offset);
                *e = (*e).max(offset);
            }
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &offsets {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset));
        }
        match runtime.block_on(admin.delete_records(&tpl, &options)) {
            Ok(result) => {
                for element in result.elements() {
                    if let Err(e) = element.error() {
                        tracing::warn!(topic = element.topic(), partition = element.partition(), error = %e, "purging repartition records failed");
                    }
                }
                tracing::debug!(partitions = offsets.len(), "purged repartition topics");
            }
            Err(e) => tracing::warn!(error = %e, "purging repartition records failed"),
        }
    }
}
