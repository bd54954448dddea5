//! The on-media format's version: a pool written by an older format (1: one log, checked
//! words hashed offset first; 2: one log and a commit word) is refused with a clear, typed
//! error instead of being misread (`docs/nvthreads.md` §4.2).

use nvthreads::journal::{LAYOUT, VERSION};
use nvthreads::{Config, Journal, NvtError};
use pmem::{CreateOptions, NativeOptions, Pool};

const HEAP: u64 = 16 << 10;
const LOG: u64 = 4 << 10;

/// The check of a version-1 checked word: CRC-32 of the offset, then the value.
fn version_1_seal(value: u64, offset: u64) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&offset.to_le_bytes());
    hasher.update(&value.to_le_bytes());
    value | u64::from(hasher.finalize() & 0xffff) << 48
}

/// The check of a version-2 checked word: `pmem::checked`, value then offset.
fn version_2_seal(value: u64, offset: u64) -> u64 {
    pmem::checked::seal(value, offset, "w").expect("fits")
}

/// Rewrites the runtime header of the closed pool at `path` as an older version wrote it:
/// the version field (header CRC recomputed); for versions 1 and 2 also the page size as a
/// `u32` at 56, and the commit word (+64) and lap word (+128), sealed as that version did.
/// (Version 3's header is the current one; only its heap metadata had no checksum.)
fn downgrade(path: &std::path::Path, root: u64, version: u32) {
    let mut bytes = std::fs::read(path).expect("read pool");
    let header = root as usize;
    bytes[header + 8..header + 12].copy_from_slice(&version.to_le_bytes());
    if version < 3 {
        bytes[header + 56..header + 60].copy_from_slice(&4096u32.to_le_bytes());
    }
    let crc = crc32fast::hash(&bytes[header..header + 60]);
    bytes[header + 60..header + 64].copy_from_slice(&crc.to_le_bytes());
    if version >= 3 {
        std::fs::write(path, bytes).expect("write pool");
        return;
    }
    let seal = if version == 1 {
        version_1_seal
    } else {
        version_2_seal
    };
    for (offset, value) in [(root + 64, 0u64), (root + 128, 2u64)] {
        let at = offset as usize;
        bytes[at..at + 8].copy_from_slice(&seal(value, offset).to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write pool");
}

#[test]
fn older_pools_are_refused_with_a_typed_error() {
    for version in [1, 2, 3] {
        an_older_pool_is_refused(version);
    }
}

fn an_older_pool_is_refused(version: u32) {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tempdir");
    let path = dir.path().join("old.pool");
    let config = Config {
        heap_len: HEAP,
        log_len: LOG,
        lanes: 2,
        base_addr: nvthreads::DEFAULT_BASE_ADDR,
    };
    let pool =
        Pool::create(&path, &CreateOptions::new(LAYOUT, config.pool_size())).expect("create");
    let root = pool.root().offset;
    let (journal, _) = Journal::create_in(pool, &config).expect("format");
    journal.close().expect("close");
    // The current format opens; the same pool as an older version wrote it does not.
    let pool = Pool::open(&path, LAYOUT, &NativeOptions::default()).expect("open");
    let (journal, _, _) = Journal::open_in(pool, Default::default(), None).expect("recover");
    journal.close().expect("close");
    downgrade(&path, root, version);
    let pool = Pool::open(&path, LAYOUT, &NativeOptions::default()).expect("the pool itself opens");
    let error =
        Journal::open_in(pool, Default::default(), None).expect_err("older version refused");
    assert!(
        matches!(error, NvtError::UnsupportedVersion { found, supported } if found == version && supported == VERSION),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!("unsupported NVthreads format version {version} (this build reads {VERSION})")
    );
}

#[test]
fn a_version_1_word_fails_the_current_check() {
    // The word forms differ, so a version-1 word read as the current form is corruption,
    // never a plausible epoch (the version field is checked first; this pins the reason).
    for (value, offset) in [(0u64, 0x1040u64), (7, 0x1080)] {
        assert!(pmem::checked::open(version_1_seal(value, offset), offset, "w").is_err());
    }
}
