//! Restores run outside the rebalance callback, in slices between
//! processing rounds: a word-count task whose changelog holds 14,000,000
//! records restores on an instance whose `max.poll.interval.ms` is far
//! below the restore time. The instance stays in the group (no task
//! revoked, no poll-interval violation), its other tasks keep committing
//! output while the restore runs, and the final counts are exact
//! (`exactly_once_v2`, read back with `read_committed`).
//!
//! Restoring tasks are read together: four tasks whose changelogs
//! (written in transactions, so they end in transaction markers) differ in
//! size restore at once, each store gets exactly its own partition's
//! records, and counting goes on from the restored values. So are stores
//! of the same partition number behind two changelogs (two counting
//! subtopologies, state directory wiped). Long stores (over 100,000
//! records behind) are the exception: they are read one after another,
//! alongside the short ones, so each task runs again as soon as its own
//! store is current.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::counting::{Fixture, output_counts, serial, tail, wait_until, word_count_truth};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use weir::topologies::word_count::WORD_COUNT;

/// Changelog records of the restoring task: its restore must outlast
/// [`MAX_POLL_INTERVAL_MS`] twice over (8,000,000 once took under 6 s).
const CHANGELOG_RECORDS: u64 = 14_000_000;
/// The instance's poll interval: far below the restore.
const MAX_POLL_INTERVAL_MS: u64 = 6_000;

/// Writes `n` count records of keys `{prefix}{i}` to `partition` of
/// `topic` (what a long-running application would have left there).
fn seed_partition(topic: &str, partition: i32, prefix: &str, n: u64) {
    let producer: BaseProducer = common::base_config()
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    for i in 0..n {
        let key = format!("{prefix}{i}");
        let value = 1i64.to_be_bytes();
        let record = BaseRecord::to(topic)
            .partition(partition)
            .key(key.as_str())
            .payload(&value[..]);
        send_waiting(&producer, record);
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// Sends `record`, serving delivery reports while librdkafka's queue is
/// full.
fn send_waiting(producer: &BaseProducer, mut record: BaseRecord<'_, str, [u8]>) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, back)) => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
        }
    }
}

/// Reads `topic` with `read_committed` from the start until `stop`, noting
/// when each record arrived.
fn watch_output(topic: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Instant>> {
    std::thread::spawn(move || {
        let consumer: BaseConsumer = common::base_config()
            .set("group.id", "restore-slices-watcher")
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..4 {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        let mut arrivals = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                assert!(m.payload().is_some());
                arrivals.push(Instant::now());
            }
        }
        arrivals
    })
}

/// Fails the test when `app` exited or `deadline` passed while waiting for
/// `what`.
fn assert_waiting(app: &mut common::weir_app::WeirApp, deadline: Instant, what: &str) {
    assert!(
        app.is_running(),
        "the instance exited:\n{}",
        tail(&app.log_text())
    );
    assert!(
        Instant::now() < deadline,
        "{what}:\n{}",
        tail(&app.log_text())
    );
}

/// When the instance's `weir_restoring_tasks` first went above 0 and then
/// back to 0.
fn restore_window(app: &mut common::weir_app::WeirApp) -> (Instant, Instant) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut start = None;
    loop {
        assert_waiting(app, deadline, "no restore seen");
        let now = Instant::now();
        let restoring = app.metric("weir_restoring_tasks").map(|n| n > 0.0);
        match (start, restoring) {
            (None, Some(true)) => start = Some(now),
            (Some(began), Some(false)) => return (began, now),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_long_restore_does_not_block_polling_or_the_other_tasks() {
    let _serial = serial();
    let mut f = Fixture::new("restore-slices", &WORD_COUNT);
    let changelog = format!("{}-counts-changelog", f.app_id);
    common::broker().create_topics(&[(&changelog, 4)]);
    let seeded = Instant::now();
    // Keys no sample sentence has.
    seed_partition(&changelog, 0, "seed-", CHANGELOG_RECORDS);
    println!(
        "seeded {CHANGELOG_RECORDS} changelog records in {:.1} s",
        seeded.elapsed().as_secs_f64()
    );

    // Under the classic protocol Weir lowers its session timeout to match;
    // under the consumer protocol the broker owns the session.
    f.extra = vec![format!(
        "consumer.max.poll.interval.ms={MAX_POLL_INTERVAL_MS}"
    )];
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_output(f.output.clone(), stop.clone());
    // Input flows the whole time: 50 sentences every 100 ms.
    let produced = Arc::new(AtomicU64::new(0));
    let feeder = {
        let (stop, produced) = (stop.clone(), produced.clone());
        let input = f.input.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let from = produced.load(Ordering::SeqCst);
                common::produce_samples(&input, weir::topologies::word_count::sample, from, 50);
                produced.store(from + 50, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut app = f.start(0, "exactly_once_v2");

    // The restore window, as the instance's metrics show it.
    let (start, end) = restore_window(&mut app);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    feeder.join().unwrap();
    let n = produced.load(Ordering::SeqCst);
    let truth = word_count_truth(n);
    let counts = common::counting::wait_for_output(
        &f.output,
        Duration::from_secs(120),
        &mut [&mut app],
        |c| truth.iter().all(|(w, t)| c.get(w) == Some(t)),
    );
    let arrivals = watcher.join().unwrap();
    let during = arrivals.iter().filter(|t| **t > start && **t < end).count();
    let rebalances = app.metric("weir_rebalances_total").unwrap_or(0.0);
    let moved = |change: &str| {
        app.metric_with("weir_rebalance_tasks_total", &[("change", change)])
            .unwrap_or_else(|| panic!("no weir_rebalance_tasks_total{{change={change}}}"))
    };
    let (assigned, revoked) = (moved("assigned"), moved("revoked"));
    let log = app.log_text();
    assert_eq!(app.stop(), Some(0), "{}", tail(&app.log_text()));

    let restored_line = log
        .lines()
        .find(|l| l.contains("restored task") && l.contains("1_0"))
        .unwrap_or_else(|| panic!("no restore of task 1_0 logged:\n{}", tail(&log)));
    println!("{restored_line}");
    for line in log.lines().filter(|l| l.contains("rebalance")) {
        println!("{line}");
    }
    println!(
        "restore window seen on /metrics: {:.1} s; output records committed meanwhile: {during}; rebalances: {rebalances}; tasks assigned {assigned}, revoked {revoked}; sentences: {n}",
        (end - start).as_secs_f64()
    );
    assert!(
        (end - start) > Duration::from_millis(MAX_POLL_INTERVAL_MS),
        "the restore ({:?}) must outlast max.poll.interval.ms for this test to mean anything",
        end - start
    );
    assert!(
        during > 0,
        "other tasks produced no output while task 1_0 restored"
    );
    // Under KIP-848 the first assignment may come in two steps (the
    // repartition topic created at start-up can be missing from the
    // broker's metadata at the first heartbeat), so the rebalances are
    // not counted; what a member dropped from the group does is lose
    // (revoke) its tasks.
    assert!(assigned > 0.0, "tasks were assigned ({assigned})");
    assert_eq!(
        revoked, 0.0,
        "the instance stayed in the group: no task was revoked ({rebalances} rebalances)"
    );
    assert!(
        !log.contains("max.poll.interval.ms"),
        "librdkafka reported a poll interval violation:\n{}",
        tail(&log)
    );
    for (word, count) in &truth {
        assert_eq!(counts.get(word), Some(count), "count of {word}");
    }
    assert_eq!(
        output_counts(&f.output).len(),
        truth.len(),
        "only sample words are output"
    );
}

/// Distinct keys counted once each in the seeded changelog.
const SEED_KEYS: u64 = 60_000;
/// Counts of one key written one after the other (its last is the one a
/// restored store must hold): makes its partition the longest to restore.
const HOT_WRITES: u64 = 100_000;

/// Writes the changelog of a word count that saw each `seed-{i}` once and
/// `hot` [`HOT_WRITES`] times, in transactions of 10,000 records; keys land
/// on the partition Kafka's default partitioner (and Weir's repartitioning)
/// gives them, so each count belongs to the task that counts the word.
fn seed_transactional_changelog(topic: &str) {
    let producer: BaseProducer = common::base_config()
        .set("partitioner", "murmur2_random")
        .set("transactional.id", format!("{topic}-seeder"))
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    let records = (0..SEED_KEYS)
        .map(|i| (format!("seed-{i}"), 1i64))
        .chain((1..=HOT_WRITES as i64).map(|n| ("hot".to_string(), n)));
    let mut in_transaction = 0;
    producer.begin_transaction().unwrap();
    for (key, count) in records {
        let value = count.to_be_bytes();
        send_waiting(
            &producer,
            BaseRecord::to(topic).key(key.as_str()).payload(&value[..]),
        );
        in_transaction += 1;
        if in_transaction == 10_000 {
            producer
                .commit_transaction(Duration::from_secs(60))
                .unwrap();
            producer.begin_transaction().unwrap();
            in_transaction = 0;
        }
    }
    producer
        .commit_transaction(Duration::from_secs(60))
        .unwrap();
}

#[test]
fn every_restoring_task_reads_its_own_changelog_at_once() {
    let _serial = serial();
    let f = Fixture::new("restore-together", &WORD_COUNT);
    let changelog = format!("{}-counts-changelog", f.app_id);
    common::broker().create_topics(&[(&changelog, 4)]);
    seed_transactional_changelog(&changelog);
    let seeded = common::read_to_end(&changelog);
    let sizes: Vec<i64> = (0..4)
        .map(|p| seeded.iter().filter(|r| r.partition == p).count() as i64)
        .collect();
    println!("seeded changelog partitions: {sizes:?}");
    assert_eq!(
        sizes.iter().sum::<i64>() as u64,
        SEED_KEYS + HOT_WRITES,
        "the seeded changelog holds every record"
    );

    let mut app = f.start(0, "exactly_once_v2");
    // Every third seeded word once more, and `hot` once more.
    let words: Vec<String> = (0..SEED_KEYS)
        .step_by(3)
        .map(|i| format!("seed-{i}"))
        .chain(["hot".to_string()])
        .collect();
    let lines: Vec<(Option<Vec<u8>>, Vec<u8>)> = words
        .chunks(100)
        .map(|chunk| (None, chunk.join(" ").into_bytes()))
        .collect();
    common::produce_batch(&f.input, &lines);
    let expected: std::collections::BTreeMap<String, i64> = words
        .iter()
        .map(|w| {
            let count = if w == "hot" { HOT_WRITES as i64 + 1 } else { 2 };
            (w.clone(), count)
        })
        .collect();
    let counts = common::counting::wait_for_output(
        &f.output,
        Duration::from_secs(180),
        &mut [&mut app],
        |c| expected.iter().all(|(w, n)| c.get(w) == Some(n)),
    );
    let log = app.log_text();
    assert_eq!(app.stop(), Some(0), "{}", tail(&log));
    for (word, count) in &expected {
        assert_eq!(counts.get(word), Some(count), "count of {word}");
    }
    assert_eq!(
        counts.len(),
        expected.len(),
        "only the words written are output"
    );
    // Each task applied exactly the records of its partition: none twice,
    // none of another partition.
    let restored: Vec<(String, u64)> = log
        .lines()
        .filter(|l| l.contains("restored task"))
        .map(|l| {
            let field = |name: &str| {
                let at = l.find(&format!("{name}=")).unwrap() + name.len() + 1;
                l[at..].split_whitespace().next().unwrap().to_string()
            };
            (field("task"), field("restored").parse().unwrap())
        })
        .collect();
    println!("restored: {restored:?}");
    for (p, size) in sizes.iter().enumerate() {
        let task = format!("1_{p}");
        let applied: Vec<u64> = restored
            .iter()
            .filter(|(t, _)| *t == task)
            .map(|(_, n)| *n)
            .collect();
        if *size == 0 {
            assert!(applied.is_empty(), "task {task} had nothing to restore");
        } else {
            assert_eq!(
                applied,
                vec![*size as u64],
                "task {task} restored its partition's records once"
            );
        }
    }
}

/// Keys counted by the first and the second counting subtopology.
const FIRST_KEYS: usize = 20_000;
const SECOND_KEYS: usize = 150_000;

/// Each of `n` keys `{prefix}{i}-` (padded to 120 bytes) once (keyed
/// records, value ignored). The padding makes a partition of the larger
/// changelog take several fetches, so the end of the smaller one's
/// partition of the same number arrives while it is still being read.
fn keyed(prefix: &str, n: usize) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let key = format!("{:-<120}", format!("{prefix}{i}-"));
            (Some(key.into_bytes()), b"x".to_vec())
        })
        .collect()
}

/// Waits up to 180 s ([`wait_until`]) until `topic` holds `keys` keys
/// that all count `n`; returns how many keys it holds and up to five that
/// count otherwise (none, unless the wait failed).
fn counts_reaching(topic: &str, keys: usize, n: i64) -> (usize, Vec<(String, i64)>) {
    wait_until(
        Duration::from_secs(180),
        Duration::from_millis(500),
        &mut [],
        || {
            let counts = output_counts(topic);
            let other: Vec<(String, i64)> = counts
                .iter()
                .filter(|(_, c)| **c != n)
                .take(5)
                .map(|(k, c)| (k.clone(), *c))
                .collect();
            (counts.len(), other)
        },
        |(len, other)| *len == keys && other.is_empty(),
    )
}

/// Two counting subtopologies make two tasks of every partition number,
/// each with a store behind its own changelog. With the state directory
/// wiped, both are restored together: the end of partition `p` of the
/// small changelog must not end the restore of partition `p` of the large
/// one, and no store takes the other's records. Counting goes on from the
/// restored values: every key counted once before the restart and once
/// after must read 2, and no other key may appear.
#[test]
fn stores_of_the_same_partition_number_in_two_changelogs_restore_together() {
    use weir::config::{ProcessingGuarantee, StreamsConfig};
    use weir::runtime::KafkaStreams;
    use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};

    let _serial = serial();
    let app_id = common::unique_topic("restore-same-number");
    let topic = |name: &str| format!("{app_id}-{name}");
    let (first, second, first_out, second_out) = (
        topic("first"),
        topic("second"),
        topic("first-out"),
        topic("second-out"),
    );
    common::broker().create_topics(&[(&first, 4), (&second, 4), (&first_out, 4), (&second_out, 4)]);
    let topology = || {
        let builder = StreamsBuilder::new();
        for (input, store, output) in [
            (&first, "first-counts", &first_out),
            (&second, "second-counts", &second_out),
        ] {
            builder
                .stream::<String, String>(input, Consumed::new())
                .group_by_key(Grouped::new())
                .count(Materialized::as_(store))
                .to_stream()
                .to(output, Produced::new());
        }
        let topology = builder.build().unwrap();
        assert_eq!(topology.subtopology_count(), 2, "one task per input");
        topology
    };
    let start = |dir: &std::path::Path| {
        let mut config = StreamsConfig::new(&app_id, common::bootstrap());
        config.state_dir = dir.to_path_buf();
        config.processing_guarantee = ProcessingGuarantee::ExactlyOnceV2;
        let mut app = KafkaStreams::new(topology(), config).unwrap();
        app.start().expect("the app starts");
        app
    };

    common::produce_batch(&first, &keyed("f", FIRST_KEYS));
    common::produce_batch(&second, &keyed("s", SECOND_KEYS));
    let before = tempfile::tempdir().unwrap();
    let mut app = start(before.path());
    assert_eq!(
        counts_reaching(&first_out, FIRST_KEYS, 1),
        (FIRST_KEYS, vec![])
    );
    assert_eq!(
        counts_reaching(&second_out, SECOND_KEYS, 1),
        (SECOND_KEYS, vec![])
    );
    assert!(app.close(Duration::from_secs(60)), "the first run stops");
    drop(before);

    // A new state directory: both stores restore in full from their
    // changelogs, whose partitions differ in size by 7.5x (about 0.6 and
    // 4.5 MB).
    let after = tempfile::tempdir().unwrap();
    let mut app = start(after.path());
    common::produce_batch(&first, &keyed("f", FIRST_KEYS));
    common::produce_batch(&second, &keyed("s", SECOND_KEYS));
    let results = [
        (
            &first_out,
            counts_reaching(&first_out, FIRST_KEYS, 2),
            FIRST_KEYS,
        ),
        (
            &second_out,
            counts_reaching(&second_out, SECOND_KEYS, 2),
            SECOND_KEYS,
        ),
    ];
    assert!(app.close(Duration::from_secs(60)), "the second run stops");
    for (output, (len, wrong), keys) in results {
        assert!(
            wrong.is_empty(),
            "{output}: counts not continued from the restored store, e.g. {wrong:?}"
        );
        assert_eq!(len, keys, "{output}: only the keys written");
    }
}

/// The partitions of the next test seeded with a long store's records,
/// and how many: each above `LARGE_BACKLOG` (100,000), the backlog above
/// which stores are read one at a time.
const LONG_STORES: [(i32, u64); 3] = [(0, 300_000), (1, 150_000), (2, 200_000)];

/// `(restored, remaining)` records of the store of each task of
/// [`LONG_STORES`] that has started restoring, from one scrape of
/// `/metrics`.
fn restore_progress(body: &str) -> std::collections::BTreeMap<String, (f64, f64)> {
    LONG_STORES
        .iter()
        .map(|(p, _)| {
            let task = format!("1_{p}");
            let of = |name| common::weir_app::metric_in(body, name, &[("task", task.as_str())]);
            let progress = (
                of("weir_restore_restored_records_total"),
                of("weir_restore_remaining_records"),
            );
            (task, progress)
        })
        .filter(|(_, (restored, remaining))| *restored > 0.0 || *remaining > 0.0)
        .collect()
}

/// Long stores restore one after another, the shortest first: three tasks
/// whose changelogs hold 300,000, 150,000 and 200,000 records (the state
/// directory is new) are never seen restoring at the same time on
/// `/metrics`, one is seen restored while another has not started, and
/// they finish in the order 150,000, 200,000, 300,000, so the first task
/// runs again after a fifth of the restore instead of at its end. Each
/// applies exactly its partition's records.
#[test]
fn long_stores_restore_one_after_another() {
    let _serial = serial();
    let f = Fixture::new("restore-in-turn", &WORD_COUNT);
    let changelog = format!("{}-counts-changelog", f.app_id);
    common::broker().create_topics(&[(&changelog, 4)]);
    for (p, n) in LONG_STORES {
        seed_partition(&changelog, p, &format!("seed-{p}-"), n);
    }
    let mut app = f.start(0, "exactly_once_v2");

    let deadline = Instant::now() + Duration::from_secs(240);
    let (mut samples, mut most_at_once, mut one_done_one_waiting) = (0, 0, false);
    let mut finished = Vec::<String>::new();
    while finished.len() < LONG_STORES.len() {
        let what = format!("the restores did not finish; finished: {finished:?}");
        assert_waiting(&mut app, deadline, &what);
        let Some((200, body)) = app.http_get("/metrics") else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let progress = restore_progress(&body);
        samples += 1;
        let at_once = progress
            .values()
            .filter(|(restored, remaining)| *restored > 0.0 && *remaining > 0.0)
            .count();
        most_at_once = most_at_once.max(at_once);
        for (task, (restored, remaining)) in &progress {
            if *restored > 0.0 && *remaining == 0.0 && !finished.contains(task) {
                finished.push(task.clone());
            }
        }
        let started = progress.len();
        if !finished.is_empty() && started < LONG_STORES.len() {
            one_done_one_waiting = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = app.log_text();
    assert_eq!(app.stop(), Some(0), "{}", tail(&log));
    println!(
        "{samples} scrapes; tasks restored in the order {finished:?}; most restoring at once: {most_at_once}"
    );
    assert_eq!(
        most_at_once, 1,
        "long stores were read together (two or more part-restored in one scrape)"
    );
    assert!(
        one_done_one_waiting,
        "no scrape showed a restored task while another had not started"
    );
    assert_eq!(finished, ["1_1", "1_2", "1_0"], "the shortest store first");
    for (p, n) in LONG_STORES {
        let task = format!("1_{p}");
        let line = log
            .lines()
            .find(|l| l.contains("restored task") && l.contains(&format!("task={task} ")))
            .unwrap_or_else(|| panic!("no restore of {task} logged:\n{}", tail(&log)));
        assert!(
            line.contains(&format!("restored={n} ")),
            "{task} applied exactly its partition's records: {line}"
        );
    }
}
