//! The persistent heap's own metadata, in heap page 0 (`docs/nvthreads.md` §4.5): a bump
//! pointer and a directory of named objects. It lives in the tracked heap, so `nvmalloc`'s
//! changes are logged and committed exactly like the program's own writes, in the same
//! section. Pure code over the page's bytes.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 8 | magic `"NVTHEAP1"` |
//! | 8 | 8 | `top`: heap offset of the first free byte (starts at 4096) |
//! | 16 | 8 | number of directory entries in use |
//! | 24 | 8 | bytes at the heap's end reserved for persistent globals (0: none) |
//! | 32 | 8 | fingerprint of the executable whose globals are stored there (0: none yet) |
//! | 40 | 8 | length of those globals |
//! | 48 | 4 | CRC-32 (IEEE) of the page with these 4 bytes zero |
//! | 52 | 12 | reserved (zero) |
//! | 64 + 64·i | 64 | entry `i` (`i < 63`): name (48 bytes, NUL-padded, at most 47 bytes), heap offset (`u64`), size (`u64`) |

#![forbid(unsafe_code)]

/// Metadata magic.
pub const MAGIC: [u8; 8] = *b"NVTHEAP1";
/// Where the page's CRC-32 is (computed with these 4 bytes zero).
const CHECKSUM_AT: usize = 48;
/// Size of the metadata (heap page 0).
pub const META_LEN: usize = 4096;
/// Longest name, in bytes.
pub const NAME_MAX: usize = 47;
/// Directory entries.
pub const ENTRIES: usize = 63;
/// Alignment of every allocation.
pub const ALIGN: u64 = 16;
const ENTRY_AT: usize = 64;
const ENTRY_LEN: usize = 64;
const NAME_FIELD: usize = 48;

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Not enough heap left.
    #[error("the persistent heap has no {size} free bytes (NVT_HEAP_MB sets a new pool's heap)")]
    OutOfMemory {
        /// Bytes asked for.
        size: u64,
    },
    /// The directory is full (`arena`: one of its names is the persistent `malloc` arena's).
    #[error("all {ENTRIES} names of the persistent heap are in use{}", arena_note(*arena))]
    DirectoryFull {
        /// Whether the persistent `malloc` arena (`NVT_MALLOC=persistent`) holds one name.
        arena: bool,
    },
    /// The runtime is dormant (`NVT_DISABLE=1`) and glibc could not allocate.
    #[error("the runtime is dormant and glibc could not allocate {size} bytes")]
    DormantOutOfMemory {
        /// Bytes asked for.
        size: u64,
    },
    /// A size of 0.
    #[error("the size is 0 (an object has at least 1 byte)")]
    ZeroSize,
    /// Name longer than [`NAME_MAX`].
    #[error("the name is {len} bytes long; names have at most {NAME_MAX}")]
    NameTooLong {
        /// Its length.
        len: usize,
    },
    /// Name empty.
    #[error("the name is empty")]
    EmptyName,
    /// An object of that name exists and is smaller than asked.
    #[error("the object of that name has {existing} bytes, fewer than the {size} asked for")]
    TooSmall {
        /// Its size.
        existing: u64,
        /// Bytes asked for.
        size: u64,
    },
}

impl AllocError {
    /// The `errno` `nvmalloc` sets for it (documented in `include/nvthreads.h`).
    pub fn errno(self) -> i32 {
        match self {
            AllocError::OutOfMemory { .. } | AllocError::DormantOutOfMemory { .. } => libc::ENOMEM,
            AllocError::DirectoryFull { .. } => libc::ENOSPC,
            AllocError::ZeroSize => libc::EINVAL,
            AllocError::NameTooLong { .. } => libc::ENAMETOOLONG,
            AllocError::EmptyName => libc::EINVAL,
            AllocError::TooSmall { .. } => libc::EEXIST,
        }
    }
}

fn u64_at(meta: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(meta[at..at + 8].try_into().expect("8 bytes"))
}

fn put_u64(meta: &mut [u8], at: usize, value: u64) {
    meta[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// What heap page 0 holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaState {
    /// Nothing yet: every byte zero (a heap the runtime has never formatted).
    Blank,
    /// Metadata whose magic and checksum are right.
    Formatted,
    /// Anything else: damaged metadata, never to be formatted over (it names the heap's
    /// objects).
    Damaged(String),
}

/// Tells a blank page from metadata and from damage.
pub fn state(meta: &[u8]) -> MetaState {
    if meta.iter().all(|&byte| byte == 0) {
        MetaState::Blank
    } else if meta[..8] != MAGIC {
        MetaState::Damaged("heap metadata: bad magic".into())
    } else if checksum(meta) != u32_at(meta, CHECKSUM_AT) {
        MetaState::Damaged("heap metadata: checksum mismatch".into())
    } else {
        MetaState::Formatted
    }
}

/// CRC-32 of the page with its checksum field taken as zero.
fn checksum(meta: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&meta[..CHECKSUM_AT]);
    hasher.update(&[0; 4]);
    hasher.update(&meta[CHECKSUM_AT + 4..META_LEN]);
    hasher.finalize()
}

/// Stores the page's checksum: every change to the metadata ends with it, in the same
/// section, so a committed page always carries its own.
fn seal(meta: &mut [u8]) {
    let sum = checksum(meta);
    meta[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&sum.to_le_bytes());
}

fn u32_at(meta: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(meta[at..at + 4].try_into().expect("4 bytes"))
}

/// Writes empty metadata.
pub fn format(meta: &mut [u8]) {
    assert_eq!(meta.len(), META_LEN);
    meta[8..].fill(0);
    put_u64(meta, 8, META_LEN as u64);
    meta[..8].copy_from_slice(&MAGIC);
    seal(meta);
}

/// The persistent-globals record: `(reserved bytes, fingerprint, length)`.
pub fn globals(meta: &[u8]) -> (u64, u64, u64) {
    (u64_at(meta, 24), u64_at(meta, 32), u64_at(meta, 40))
}

/// Records the persistent globals: bytes reserved at the heap's end, the executable's
/// fingerprint, the globals' length.
pub fn set_globals(meta: &mut [u8], reserved: u64, fingerprint: u64, len: u64) {
    put_u64(meta, 24, reserved);
    put_u64(meta, 32, fingerprint);
    put_u64(meta, 40, len);
    seal(meta);
}

/// First free heap offset.
pub fn top(meta: &[u8]) -> u64 {
    u64_at(meta, 8)
}

/// Checks the metadata against a heap of `heap_len` bytes.
pub fn validate(meta: &[u8], heap_len: u64) -> Result<(), String> {
    let top = top(meta);
    let count = u64_at(meta, 16);
    let (reserved, _, globals_len) = globals(meta);
    let usable = heap_len.saturating_sub(reserved);
    if !reserved.is_multiple_of(4096)
        || globals_len > reserved
        || !(META_LEN as u64..=usable).contains(&top)
    {
        return Err(format!(
            "heap metadata: top {top}, {reserved} bytes reserved for {globals_len} of globals"
        ));
    }
    if count > ENTRIES as u64 {
        return Err(format!("heap metadata: {count} names"));
    }
    for i in 0..count as usize {
        let (offset, size) = entry(meta, i);
        if offset < META_LEN as u64 || offset.checked_add(size).is_none_or(|end| end > top) {
            return Err(format!("heap metadata: name {i} at {offset} size {size}"));
        }
    }
    Ok(())
}

fn entry(meta: &[u8], i: usize) -> (u64, u64) {
    let at = ENTRY_AT + i * ENTRY_LEN + NAME_FIELD;
    (u64_at(meta, at), u64_at(meta, at + 8))
}

fn name_of(meta: &[u8], i: usize) -> &[u8] {
    let at = ENTRY_AT + i * ENTRY_LEN;
    let field = &meta[at..at + NAME_FIELD];
    let len = field.iter().position(|&b| b == 0).unwrap_or(NAME_FIELD);
    &field[..len]
}

/// The named object's `(heap offset, size)`.
pub fn lookup(meta: &[u8], name: &[u8]) -> Option<(u64, u64)> {
    let count = (u64_at(meta, 16) as usize).min(ENTRIES);
    (0..count)
        .find(|&i| name_of(meta, i) == name)
        .map(|i| entry(meta, i))
}

fn arena_note(arena: bool) -> String {
    if arena {
        format!(
            " ({} by the program, 1 by the persistent malloc arena of NVT_MALLOC=persistent)",
            ENTRIES - 1
        )
    } else {
        String::new()
    }
}

/// Checks an `nvmalloc` request before the heap is looked at: a size of at least 1, and a
/// name (if any) of 1 to [`NAME_MAX`] bytes.
pub fn check_request(size: u64, name: Option<&[u8]>) -> Result<(), AllocError> {
    match name {
        _ if size == 0 => Err(AllocError::ZeroSize),
        Some([]) => Err(AllocError::EmptyName),
        Some(name) if name.len() > NAME_MAX => Err(AllocError::NameTooLong { len: name.len() }),
        _ => Ok(()),
    }
}

/// Allocates `size` bytes (at least 1), aligned to [`ALIGN`], recording `name` if given.
/// Returns the heap offset. Fresh heap bytes are zero.
pub fn allocate(
    meta: &mut [u8],
    heap_len: u64,
    size: u64,
    name: Option<&[u8]>,
) -> Result<u64, AllocError> {
    match name {
        Some([]) => return Err(AllocError::EmptyName),
        Some(name) if name.len() > NAME_MAX => {
            return Err(AllocError::NameTooLong { len: name.len() });
        }
        _ => {}
    }
    let count = u64_at(meta, 16) as usize;
    if name.is_some() && count >= ENTRIES {
        return Err(AllocError::DirectoryFull { arena: false });
    }
    let offset = top(meta).div_ceil(ALIGN) * ALIGN;
    let end = offset
        .checked_add(size.max(1))
        .filter(|&end| end <= heap_len)
        .ok_or(AllocError::OutOfMemory { size })?;
    if let Some(name) = name {
        let at = ENTRY_AT + count * ENTRY_LEN;
        meta[at..at + NAME_FIELD].fill(0);
        meta[at..at + name.len()].copy_from_slice(name);
        put_u64(meta, at + NAME_FIELD, offset);
        put_u64(meta, at + NAME_FIELD + 8, size);
        put_u64(meta, 16, count as u64 + 1);
    }
    put_u64(meta, 8, end);
    seal(meta);
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_and_anonymous_allocations() {
        let mut meta = vec![0u8; META_LEN];
        assert_eq!(state(&meta), MetaState::Blank);
        format(&mut meta);
        assert_eq!(state(&meta), MetaState::Formatted);
        let a = allocate(&mut meta, 1 << 20, 10, Some(b"alpha")).unwrap();
        let b = allocate(&mut meta, 1 << 20, 3, None).unwrap();
        let c = allocate(&mut meta, 1 << 20, 100, Some(b"gamma")).unwrap();
        assert_eq!((a, b, c), (4096, 4112, 4128));
        assert_eq!(lookup(&meta, b"alpha"), Some((4096, 10)));
        assert_eq!(lookup(&meta, b"gamma"), Some((4128, 100)));
        assert_eq!(lookup(&meta, b"beta"), None);
        assert_eq!(top(&meta), 4228);
        validate(&meta, 1 << 20).unwrap();
    }

    #[test]
    fn limits() {
        let mut meta = vec![0u8; META_LEN];
        format(&mut meta);
        assert_eq!(
            allocate(&mut meta, 8192, 5000, None),
            Err(AllocError::OutOfMemory { size: 5000 })
        );
        assert_eq!(
            allocate(&mut meta, 8192, 1, Some(b"")),
            Err(AllocError::EmptyName)
        );
        assert_eq!(
            allocate(&mut meta, 8192, 1, Some(&[b'x'; 48])),
            Err(AllocError::NameTooLong { len: 48 })
        );
        for i in 0..ENTRIES {
            allocate(&mut meta, 1 << 20, 1, Some(format!("n{i}").as_bytes())).unwrap();
        }
        assert_eq!(
            allocate(&mut meta, 1 << 20, 1, Some(b"one-more")),
            Err(AllocError::DirectoryFull { arena: false })
        );
        assert_eq!(check_request(0, None), Err(AllocError::ZeroSize));
        assert_eq!(check_request(0, Some(b"x")), Err(AllocError::ZeroSize));
        assert_eq!(check_request(1, Some(b"")), Err(AllocError::EmptyName));
        assert_eq!(check_request(1, Some(&[b'x'; 47])), Ok(()));
        validate(&meta, 1 << 20).unwrap();
    }

    #[test]
    fn corrupt_metadata_is_reported() {
        let mut meta = vec![0u8; META_LEN];
        format(&mut meta);
        put_u64(&mut meta, 8, 1 << 30);
        assert!(validate(&meta, 1 << 20).is_err());
    }

    /// A damaged page must never pass for a blank one (the runtime would format over the
    /// heap's names) nor for metadata (a changed name would hand out a fresh object).
    #[test]
    fn every_flipped_byte_is_damage() {
        let mut meta = vec![0u8; META_LEN];
        format(&mut meta);
        allocate(&mut meta, 1 << 20, 24, Some(b"state")).unwrap();
        set_globals(&mut meta, 8192, 0x1234, 100);
        assert_eq!(state(&meta), MetaState::Formatted);
        for at in 0..META_LEN {
            let mut damaged = meta.clone();
            damaged[at] ^= 0x5a;
            assert!(
                matches!(state(&damaged), MetaState::Damaged(_)),
                "byte {at}: {:?}",
                state(&damaged)
            );
        }
    }
}
