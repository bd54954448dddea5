//! Pool files on the native backend: lifecycle, locking, and every way a file can be bad.

use pmem::header::COPY_OFFSET;
use pmem::{
    CreateOptions, Media, NativeOptions, Persist, PersistMode, Pool, PoolError, WriteClass,
};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod common;
use common::{LAYOUT, SIZE, create, open, shm_dir};

#[test]
fn create_write_reopen_reads_back_and_tracks_clean_shutdown() {
    let dir = shm_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, SIZE)).expect("create");
    let root = pool.root();
    assert_eq!((root.offset, root.len), (4096, 4096));
    assert_eq!(pool.arena().end(), SIZE);
    pool.pm().write_u64(root.offset, 0xFEED, WriteClass::User);
    pool.pm().persist(root.offset, 8);
    pool.close().expect("close");

    let mode = std::fs::metadata(&path)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "new pools are private to their owner");

    let pool = open(&path).expect("reopen");
    assert!(pool.was_clean());
    assert_eq!(pool.pm().read_u64(root.offset), 0xFEED);
    pool.abandon(); // as if the process crashed

    let pool = open(&path).expect("reopen after crash");
    assert!(
        !pool.was_clean(),
        "a crash must be visible to the next opener"
    );
}

#[test]
fn tmpfs_pool_uses_adr_with_real_flushes_and_counts_them() {
    let dir = shm_dir();
    let pool =
        Pool::create(dir.path().join("p"), &CreateOptions::new(LAYOUT, SIZE)).expect("create");
    let pm = pool.pm();
    let info = pm.info();
    assert_eq!(
        (info.media, info.mode),
        (Media::EmulatedTmpfs, PersistMode::Adr)
    );
    let before = pm.stats().snapshot();
    pm.write(8192, &[7u8; 100], WriteClass::Log);
    pm.persist(8192 + 60, 100); // spans lines 128..=130 from an unaligned start
    pm.write_nt(16384, &[9u8; 256], WriteClass::User);
    pm.fence();
    let delta = pm.stats().snapshot().since(&before);
    assert_eq!(delta.stored_bytes[WriteClass::Log.index()], 100);
    assert_eq!(delta.nt_bytes[WriteClass::User.index()], 256);
    assert_eq!(delta.flushed_lines, 3);
    assert_eq!(delta.fences, 2);
    let mut back = [0u8; 256];
    pm.read(16384, &mut back);
    assert_eq!(back, [9u8; 256]);
}

#[test]
fn eadr_mode_skips_flushes_but_keeps_fences() {
    let dir = shm_dir();
    let mut options = CreateOptions::new(LAYOUT, SIZE);
    options.native.mode = Some(PersistMode::Eadr);
    let pool = Pool::create(dir.path().join("p"), &options).expect("create");
    let before = pool.pm().stats().snapshot();
    pool.pm().write(8192, &[1u8; 64], WriteClass::User);
    pool.pm().persist(8192, 64);
    let delta = pool.pm().stats().snapshot().since(&before);
    assert_eq!((delta.flushed_lines, delta.fences), (0, 1));
}

#[test]
fn every_flush_instruction_the_cpu_has_works() {
    let dir = shm_dir();
    for flush in pmem::FlushInstr::ALL
        .into_iter()
        .filter(|f| f.is_supported())
    {
        let mut options = CreateOptions::new(LAYOUT, SIZE);
        options.native.flush = Some(flush);
        let path = dir.path().join(flush.name());
        let pool = Pool::create(&path, &options).expect("create");
        assert_eq!(pool.pm().info().flush, flush);
        pool.pm().write(8192, &[3u8; 64], WriteClass::User);
        pool.pm().persist(8192, 64);
    }
}

#[test]
fn page_cache_pool_uses_msync() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let pool =
        Pool::create(dir.path().join("p"), &CreateOptions::new(LAYOUT, SIZE)).expect("create");
    if pool.pm().info().media != Media::PageCache {
        eprintln!(
            "skipped: {} is not an ordinary file system",
            dir.path().display()
        );
        return;
    }
    assert_eq!(pool.pm().info().mode, PersistMode::Msync);
    pool.pm().write(8192, &[5u8; 10], WriteClass::User);
    pool.pm().persist(8192, 10);
    pool.pm().write_nt(12288, &[6u8; 10], WriteClass::User);
    assert!(!pool.pm().is_poisoned());
}

#[test]
fn second_open_in_the_same_process_is_refused() {
    let dir = shm_dir();
    let path = create(dir.path());
    let _held = open(&path).expect("first open");
    assert!(matches!(open(&path), Err(PoolError::AlreadyOpen)));
}

/// Helper run in a child process by `open_held_by_another_process_is_refused`.
#[test]
fn hold_pool_for_other_process() {
    let Ok(path) = std::env::var("FERRITE_TEST_HOLD_POOL") else {
        return;
    };
    let _pool = open(Path::new(&path)).expect("child opens");
    println!("HELD");
    std::thread::sleep(std::time::Duration::from_secs(30));
}

#[test]
fn open_held_by_another_process_is_refused() {
    use std::io::{BufRead, BufReader};
    let dir = shm_dir();
    let path = create(dir.path());
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "hold_pool_for_other_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FERRITE_TEST_HOLD_POOL", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let held = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("HELD"));
    assert!(held, "child did not report holding the pool");
    let result = open(&path);
    child.kill().expect("kill child");
    let _ = child.wait();
    assert!(
        matches!(result, Err(PoolError::AlreadyOpen)),
        "got {result:?}"
    );
    assert!(
        pmem::inspect(&path).is_ok(),
        "inspection does not need the lock"
    );
    let pool = open(&path).expect("open after the holder died");
    drop(pool);
    assert!(!pmem::inspect(&path).expect("inspect").in_use);
}

#[test]
fn create_refuses_an_existing_file_and_keeps_it() {
    let dir = shm_dir();
    let path = dir.path().join("precious");
    std::fs::write(&path, b"data").expect("write");
    let result = Pool::create(&path, &CreateOptions::new(LAYOUT, SIZE));
    assert!(matches!(result, Err(PoolError::AlreadyExists)));
    assert_eq!(std::fs::read(&path).expect("read"), b"data");
}

#[test]
fn out_of_space_is_a_typed_error_and_leaves_no_file() {
    let dir = shm_dir();
    let path = dir.path().join("huge");
    let result = Pool::create(&path, &CreateOptions::new(LAYOUT, 1 << 44));
    assert!(
        matches!(result, Err(PoolError::OutOfSpace { .. })),
        "got {result:?}"
    );
    assert!(!path.exists());
}

#[test]
fn bad_arguments_are_rejected_before_touching_the_disk() {
    let dir = shm_dir();
    let path = dir.path().join("p");
    for options in [
        CreateOptions::new(LAYOUT, 1000),
        CreateOptions::new("", SIZE),
    ] {
        assert!(matches!(
            Pool::create(&path, &options),
            Err(PoolError::InvalidArgument(_))
        ));
        assert!(!path.exists());
    }
}

#[test]
fn wrong_layout_is_refused() {
    let dir = shm_dir();
    let path = create(dir.path());
    let result = Pool::open(&path, "other", &NativeOptions::default());
    assert!(
        matches!(result, Err(PoolError::WrongLayout { .. })),
        "got {result:?}"
    );
}

fn corrupt(mutate: impl FnOnce(&Path)) -> PoolError {
    let dir = shm_dir();
    let path = create(dir.path());
    mutate(&path);
    let from_open = open(&path).expect_err("corrupt pool opened");
    let from_inspect = pmem::inspect(&path).expect_err("corrupt pool inspected");
    assert_eq!(from_open.to_string(), from_inspect.to_string());
    from_open
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

/// A flipped byte in the header and the same byte in its copy: nothing stands in for it.
#[test]
fn flipped_header_byte_is_a_checksum_error_when_its_copy_is_damaged_too() {
    for at in [9, 0x20, 0x60, 0xFC] {
        let error = corrupt(|path| {
            flip_byte(path, at);
            flip_byte(path, COPY_OFFSET as usize + at);
        });
        assert!(
            matches!(error, PoolError::ChecksumMismatch { .. }),
            "byte {at}: {error}"
        );
    }
}

/// A damaged header whose copy is intact: `inspect` names it as repairable, the open takes
/// the copy, says so, and rewrites the header, and the pool keeps its contents.
#[test]
fn a_damaged_header_is_restored_from_its_copy() {
    for at in [0, 9, 0x20, 0x60, 0xFC] {
        let dir = shm_dir();
        let path = create(dir.path());
        {
            let pool = open(&path).expect("open");
            pool.pm()
                .write(pool.root().offset, b"kept", WriteClass::Meta);
            pool.pm().persist(pool.root().offset, 4);
        }
        let intact = std::fs::read(&path).expect("read")[..256].to_vec();
        flip_byte(&path, at);
        let report = pmem::inspect(&path).expect("inspect a pool whose header copy is intact");
        assert!(report.clean, "byte {at}");
        assert!(
            matches!(report.repairable.as_slice(), [one] if one.contains("its copy at 0x800")),
            "byte {at}: {:?}",
            report.repairable
        );
        let pool = open(&path).expect("open from the copy");
        assert!(pool.was_clean(), "byte {at}");
        assert!(
            matches!(pool.repaired(), [one] if one.contains("pool header damaged")),
            "byte {at}: {:?}",
            pool.repaired()
        );
        let mut kept = [0u8; 4];
        pool.pm().read(pool.root().offset, &mut kept);
        assert_eq!(&kept, b"kept");
        drop(pool);
        assert_eq!(std::fs::read(&path).expect("read")[..256], intact[..]);
        assert!(pmem::inspect(&path).expect("inspect").repairable.is_empty());
    }
}

/// A header whose magic is zero is an interrupted creation (or re-format), never a damaged
/// header for the copy to stand in for.
#[test]
fn a_zero_magic_is_not_a_pool_even_with_an_intact_copy() {
    let error = corrupt(|path| {
        let mut bytes = std::fs::read(path).expect("read");
        bytes[..8].fill(0);
        std::fs::write(path, bytes).expect("write");
    });
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error}");
}

/// A pool made before the copy existed (no copy, no compat bit) reads as before: a damaged
/// header is refused.
#[test]
fn a_pool_without_the_copy_feature_is_refused_when_its_header_is_damaged() {
    let error = corrupt(|path| {
        let mut bytes = std::fs::read(path).expect("read");
        let copy = COPY_OFFSET as usize;
        bytes[copy..copy + 256].fill(0);
        bytes[9] ^= 0x10;
        std::fs::write(path, bytes).expect("write");
    });
    assert!(
        matches!(error, PoolError::ChecksumMismatch { .. }),
        "{error}"
    );
}

/// A damaged header and a damaged state word at once: the copy cannot be vouched for (the
/// state word binds the pool's UUID), so the header's own error stands; and a file
/// overwritten from its start by something else (a wrong magic) with a stale state word is
/// refused the same way. Nothing is written.
#[test]
fn the_copy_stands_in_only_for_the_pool_its_state_word_names() {
    let error = corrupt(|path| {
        flip_byte(path, 0x20);
        flip_byte(path, 256 + 2);
    });
    assert!(
        matches!(error, PoolError::ChecksumMismatch { .. }),
        "{error}"
    );
    let error = corrupt(|path| {
        let mut bytes = std::fs::read(path).expect("read");
        bytes[..0x800].copy_from_slice(&[0x7f; 0x800]);
        std::fs::write(path, bytes).expect("write");
    });
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error}");
}

/// A copy that differs from an intact header is named and rewritten by the next open, so one
/// flipped bit in the copy does not silently remove the protection.
#[test]
fn a_damaged_copy_is_rewritten_from_the_header() {
    let dir = shm_dir();
    let path = create(dir.path());
    let intact = std::fs::read(&path).expect("read");
    flip_byte(&path, COPY_OFFSET as usize + 0x28);
    let report = pmem::inspect(&path).expect("inspect");
    assert!(
        matches!(report.repairable.as_slice(), [one] if one.contains("copy at 0x800 damaged")),
        "{:?}",
        report.repairable
    );
    let pool = open(&path).expect("open");
    assert!(matches!(pool.repaired(), [one] if one.contains("copy")));
    drop(pool);
    let after = std::fs::read(&path).expect("read");
    let copy = COPY_OFFSET as usize..COPY_OFFSET as usize + 256;
    assert_eq!(after[copy.clone()], intact[copy]);
    assert!(pmem::inspect(&path).expect("inspect").repairable.is_empty());
}

/// A state word that fails its check is read as "not closed cleanly" (recovery then runs,
/// which is always safe) and rewritten by the open.
#[test]
fn a_damaged_state_word_reads_as_not_clean_and_is_rewritten() {
    let dir = shm_dir();
    let path = create(dir.path());
    flip_byte(&path, 256 + 2);
    let report = pmem::inspect(&path).expect("inspect");
    assert!(!report.clean);
    assert!(
        matches!(report.repairable.as_slice(), [one] if one.contains("pool state word")),
        "{:?}",
        report.repairable
    );
    let pool = open(&path).expect("open");
    assert!(!pool.was_clean());
    assert!(matches!(pool.repaired(), [one] if one.contains("pool state word")));
    drop(pool);
    let report = pmem::inspect(&path).expect("inspect");
    assert!(report.clean && report.repairable.is_empty(), "{report:?}");
}

#[test]
fn truncated_pool_is_refused_before_mapping() {
    let error = corrupt(|path| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        file.set_len(SIZE / 2).expect("truncate");
    });
    assert!(matches!(error, PoolError::Truncated { .. }), "{error}");
    let tiny = corrupt(|path| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        file.set_len(100).expect("truncate");
    });
    // The error names the size the header records, not the header's length.
    assert!(
        matches!(tiny, PoolError::Truncated { actual: 100, expected } if expected == SIZE),
        "{tiny}"
    );
}

#[test]
fn extended_pool_is_a_size_mismatch() {
    let error = corrupt(|path| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open");
        file.set_len(SIZE * 2).expect("extend");
    });
    assert!(matches!(error, PoolError::SizeMismatch { .. }), "{error}");
}

#[test]
fn random_and_empty_files_are_not_pools() {
    let dir = shm_dir();
    let random = dir.path().join("random");
    let bytes: Vec<u8> = (0..70_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&random, bytes).expect("write");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");
    for path in [random, empty] {
        let error = open(&path).expect_err("not a pool");
        assert!(
            matches!(error, PoolError::NotAPool { .. }),
            "{}: {error}",
            path.display()
        );
    }
}

#[test]
fn missing_file_is_not_found() {
    let dir = shm_dir();
    let error = open(&dir.path().join("missing")).expect_err("missing");
    assert!(matches!(error, PoolError::NotFound), "{error}");
}

/// A directory is "not a pool" (as `inspect` says), not an I/O error: opening it for
/// writing fails with `EISDIR` before its type is checked.
#[test]
fn directory_is_not_a_pool() {
    let dir = shm_dir();
    let error = open(dir.path()).expect_err("a directory");
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error:?}");
    let error = pmem::inspect(dir.path()).expect_err("a directory");
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error:?}");
}

#[test]
fn unaligned_word_writes_do_not_recurse() {
    let dir = shm_dir();
    let pool =
        Pool::create(dir.path().join("p"), &CreateOptions::new(LAYOUT, SIZE)).expect("create");
    pool.pm().write(8192 + 3, &[1; 8], WriteClass::User);
    pool.pm().write_u64(8192 + 21, 7, WriteClass::User);
    assert_eq!(pool.pm().read_u64(8192 + 21), 7);
    let mut back = [0u8; 8];
    pool.pm().read(8192 + 3, &mut back);
    assert_eq!(back, [1; 8]);
}

/// `Native::map` of a file shorter than the mapping is an error, not a mapping whose tail
/// raises SIGBUS when it is touched.
#[test]
fn mapping_more_than_the_file_holds_is_refused() {
    let dir = shm_dir();
    let path = dir.path().join("short");
    std::fs::write(&path, vec![0u8; 4096]).expect("write");
    let file = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open")
    };
    let error = pmem::Native::map(file(), 64 << 10, &NativeOptions::default())
        .expect_err("the file is 4 KiB, the mapping 64 KiB");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    let native = pmem::Native::map(file(), 4096, &NativeOptions::default()).expect("exact");
    assert_eq!(native.read_u64(4088), 0);
}

/// A FIFO is not a pool, and neither opening nor inspecting it blocks waiting for a writer
/// (files are opened with `O_NONBLOCK`); creating over it is `AlreadyExists`.
#[test]
fn a_fifo_is_not_a_pool_and_does_not_block() {
    let dir = shm_dir();
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path; mkfifo only creates the file.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let error = open(&fifo).expect_err("a FIFO");
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error:?}");
    let error = pmem::inspect(&fifo).expect_err("a FIFO");
    assert!(matches!(error, PoolError::NotAPool { .. }), "{error:?}");
    let error = Pool::create(&fifo, &CreateOptions::new(LAYOUT, SIZE)).expect_err("exists");
    assert!(matches!(error, PoolError::AlreadyExists), "{error:?}");
    assert!(fifo.exists(), "create left the FIFO alone");
}

/// A symlink to a pool opens the pool it names, and holds the same lock: the pool cannot be
/// opened twice through two names. `create` never follows a symlink, even a dangling one.
#[test]
fn a_symlink_names_its_target_and_shares_its_lock() {
    let dir = shm_dir();
    let path = create(dir.path());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    let held = open(&link).expect("open through the link");
    assert!(matches!(open(&path), Err(PoolError::AlreadyOpen)));
    drop(held);
    let dangling = dir.path().join("dangling");
    let target = dir.path().join("not-yet");
    std::os::unix::fs::symlink(&target, &dangling).expect("symlink");
    let error = Pool::create(&dangling, &CreateOptions::new(LAYOUT, SIZE)).expect_err("a link");
    assert!(matches!(error, PoolError::AlreadyExists), "{error:?}");
    assert!(!target.exists(), "create wrote through a dangling symlink");
}

const IMAGE_CHILD_ENV: &str = "FERRITE_TEST_READ_IMAGE";

/// `read_image` of a valid pool larger than the memory the process may use is an error:
/// the size comes from the file (a sparse file can claim any size), so the allocation must
/// not abort the process. The child runs with a 2 GiB address-space limit.
#[test]
fn reading_an_image_larger_than_memory_is_an_error() {
    use std::os::unix::process::CommandExt;
    let dir = shm_dir();
    let path = dir.path().join("sparse.pool");
    let size: u64 = 64 << 30;
    let header = pmem::Header::new(LAYOUT, size, 4096).expect("header");
    let file = std::fs::File::create_new(&path).expect("create");
    file.set_len(size).expect("sparse length");
    use std::os::unix::fs::FileExt;
    file.write_all_at(&header.encode(), 0).expect("header");
    file.write_all_at(&header.encode(), COPY_OFFSET)
        .expect("copy");
    let state = pmem::header::encode_state(pmem::header::FLAG_CLEAN, &header.uuid);
    file.write_all_at(&state.to_le_bytes(), pmem::header::STATE_OFFSET)
        .expect("state word");
    assert_eq!(
        pmem::inspect(&path).expect("a valid pool").header.pool_size,
        size
    );
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "read_image_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IMAGE_CHILD_ENV, &path);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let output = command.output().expect("child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("REFUSED"),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The child half of `reading_an_image_larger_than_memory_is_an_error`.
#[test]
#[ignore = "run by reading_an_image_larger_than_memory_is_an_error in a child process"]
fn read_image_child() {
    let path = std::env::var(IMAGE_CHILD_ENV).expect("run by the parent test");
    match pmem::read_image(&path) {
        Err(PoolError::Io(error)) if error.kind() == std::io::ErrorKind::OutOfMemory => {
            println!("REFUSED: {error}")
        }
        other => panic!(
            "expected an out-of-memory error, got {:?}",
            other.map(|_| ())
        ),
    }
}
