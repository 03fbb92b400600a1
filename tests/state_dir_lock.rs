//! The state directory: layout, the instance lock, and cleanup of task
//! directories this instance no longer owns.

use std::time::Duration;

use weir::state::{StateConfig, StateDirectory, StoreError};

fn config(dir: &std::path::Path, cleanup_delay_ms: u64) -> StateConfig {
    StateConfig {
        state_dir: dir.to_path_buf(),
        cleanup_delay_ms,
        ..StateConfig::default()
    }
}

#[test]
fn second_opener_gets_a_clear_locked_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 0);
    let first = StateDirectory::open(&cfg, "app").unwrap();
    let err = StateDirectory::open(&cfg, "app").unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&dir.path().join("app").display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("locked by another Weir instance"),
        "{message}"
    );
    // Another application id is a different directory with its own lock.
    let _other = StateDirectory::open(&cfg, "other-app").unwrap();
    drop(first);
    StateDirectory::open(&cfg, "app").expect("lock released on drop");
}

#[test]
fn layout_is_app_task_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut sd = StateDirectory::open(&config(dir.path(), 0), "app").unwrap();
    let store = sd.store_dir("1_3", "counts").unwrap();
    assert_eq!(store, dir.path().join("app").join("1_3").join("counts"));
    assert!(store.is_dir());
    assert!(sd.store_dir("../escape", "x").is_err());
    assert!(sd.store_dir("1_3", ".hidden").is_err());
    assert_eq!(sd.task_ids().unwrap(), vec!["1_3".to_string()]);
}

#[test]
fn unowned_task_directories_are_removed_after_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 300);
    let mut sd = StateDirectory::open(&cfg, "app").unwrap();
    sd.store_dir("0_0", "s").unwrap();
    sd.store_dir("0_1", "s").unwrap();
    sd.release_task("0_1");
    assert!(
        sd.clean_unowned(&["0_0"]).unwrap().is_empty(),
        "delay not over"
    );
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(sd.clean_unowned(&["0_0"]).unwrap(), vec!["0_1".to_string()]);
    assert_eq!(sd.task_ids().unwrap(), vec!["0_0".to_string()]);
    // A task found on disk at startup counts as released at open time.
    drop(sd);
    let mut sd = StateDirectory::open(&cfg, "app").unwrap();
    assert!(sd.clean_unowned(&[]).unwrap().is_empty());
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(sd.clean_unowned(&[]).unwrap(), vec!["0_0".to_string()]);
}
