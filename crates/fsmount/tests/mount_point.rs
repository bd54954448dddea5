//! What a mount refuses before it opens the pool says what to do about it.

use fsmount::MountError;

/// A missing mount point used to be "the mount point is not an existing directory" and no
/// more; it now says to make it (with the path, quoted for a shell).
#[test]
fn a_missing_mount_point_is_refused_saying_how_to_make_it() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("no such dir");
    let error = fsmount::check_mount_point(&missing).expect_err("missing");
    assert!(matches!(error, MountError::MissingMountPoint(_)), "{error}");
    let message = error.to_string();
    assert!(message.contains("not an existing directory"), "{message}");
    assert!(
        message.contains(&format!("`mkdir -p {}`", fsmount::shell_word(&missing))),
        "{message}"
    );
    // A file there is not something mkdir fixes: no such advice.
    let file = dir.path().join("file");
    std::fs::write(&file, b"").expect("file");
    let error = fsmount::check_mount_point(&file).expect_err("a file");
    assert!(!error.to_string().contains("mkdir"), "{error}");
}
