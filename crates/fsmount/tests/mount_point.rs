//! What a mount refuses before it opens the pool says what to do about it.

mod common;

use fsmount::MountError;

/// A missing mount point used to be "the mount point is not an existing directory" and no
/// more; it now says to make it (the path is the caller's to name, once: `ferrite fs
/// mount` prints it before the message).
#[test]
fn a_missing_mount_point_is_refused_saying_how_to_make_it() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("no such dir");
    let error = fsmount::check_mount_point(&missing).expect_err("missing");
    assert!(matches!(error, MountError::MissingMountPoint(_)), "{error}");
    let message = error.to_string();
    assert!(message.contains("not an existing directory"), "{message}");
    assert!(
        message.contains("make it first, with `mkdir -p`"),
        "{message}"
    );
    // A file there is not something mkdir fixes: no such advice.
    let file = dir.path().join("file");
    std::fs::write(&file, b"").expect("file");
    let error = fsmount::check_mount_point(&file).expect_err("a file");
    assert!(!error.to_string().contains("mkdir"), "{error}");
}

/// What is refused while a mount serves the pool says where and what to do: `fsck` said
/// "the pool is in use (mounted?); unmount it first" without the mount point, and an
/// unmount of a busy mount only "Device or resource busy (os error 16)".
#[test]
fn a_pool_in_use_and_a_busy_mount_say_what_to_do() {
    let (pool, fs) = common::fresh_fs("inuse", 4 << 20);
    let dir = tempfile::tempdir().expect("mount point");
    let config = fsmount::MountConfig {
        fsname: format!("{}{}", fsmount::FSNAME_PREFIX, pool.display()),
        ..fsmount::MountConfig::default()
    };
    let Some(mounted) = common::spawn_or_skip(fs, dir.path(), &config, &pool) else {
        return;
    };
    let mount_point = fsmount::shell_word(&dir.path().canonicalize().expect("canonical"));
    let check = fsmount::check_offline(&pool).expect_err("in use");
    let repair =
        fsmount::repair_offline(&pool, &pmem::NativeOptions::default()).expect_err("in use");
    // A file open under the mount point makes it busy.
    let held = std::fs::File::create(dir.path().join("held")).expect("create");
    let busy = fsmount::unmount(dir.path()).expect_err("busy");
    drop(held);
    mounted.unmount().expect("unmount");
    let _ = std::fs::remove_file(&pool);
    for error in [check, repair] {
        assert_eq!(error.exit_code(), 8, "{error}");
        let message = error.to_string();
        assert!(
            message.contains(&format!("mounted on {mount_point}"))
                && message.contains(&format!("`ferrite fs unmount {mount_point}`")),
            "{message}"
        );
    }
    assert_eq!(busy.kind(), std::io::ErrorKind::ResourceBusy, "{busy}");
    assert!(
        busy.to_string()
            .contains("a process has a file or its working directory under it; end it"),
        "{busy}"
    );
}
