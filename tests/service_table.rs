//! `weir table` on the real broker: it prints the latest value of every key
//! and logs nothing at ERROR level (reaching the end of a partition, which
//! is how it knows it is done, is not an error).

mod common;

use std::process::Command;

#[test]
fn weir_table_prints_the_latest_values_without_errors() {
    let topic = common::unique_topic("table");
    common::broker().create_topics(&[(topic.as_str(), 2)]);
    let records: Vec<(Option<Vec<u8>>, Vec<u8>)> = [("a", "1"), ("b", "2"), ("a", "3")]
        .iter()
        .map(|(k, v)| (Some(k.as_bytes().to_vec()), v.as_bytes().to_vec()))
        .collect();
    common::produce_batch(&topic, &records);
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["table", &topic, "--bootstrap-servers"])
        .arg(common::bootstrap())
        .env("WEIR_LOG", "info")
        .output()
        .expect("running weir table");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weir table failed: {stderr}");
    assert_eq!(stdout, "a\t3\nb\t2\n", "stderr: {stderr}");
    assert!(
        !stderr.contains("ERROR"),
        "weir table logged errors:\n{stderr}"
    );
}
