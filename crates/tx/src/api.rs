//! The transaction interface every workload is written against.
//!
//! One interface, many implementations: the `undo` and `redo` engines of this crate, the MVCC
//! engine, PMDK (in the bench crate), the volatile [`crate::mem::MemEngine`], and the trace
//! recorder of the Silo simulator. Workloads name only these traits, never an engine.
//!
//! Objects are addressed by typed persistent pointers ([`PPtr`]) plus a byte offset within the
//! object (a field). Pointers stored in PM carry a 16-bit tag of their pool, so a pointer read
//! from PM is checked against the pool it is used with.

use std::fmt;
use std::marker::PhantomData;

/// Result of transactional operations.
pub type TxResult<T> = Result<T, TxError>;

/// Why a transactional operation or a transaction failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// The application aborted the transaction.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// The heap has no block of the requested size.
    #[error("out of persistent memory allocating {size} bytes")]
    OutOfSpace {
        /// Requested size.
        size: u64,
    },
    /// The transaction's log does not fit its lane.
    #[error("transaction log of {needed} bytes exceeds the lane capacity of {capacity} bytes")]
    LogFull {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes the lane holds.
        capacity: u64,
    },
    /// A pointer is null or belongs to another pool (its tag differs).
    #[error("invalid persistent pointer {0:#x}")]
    InvalidPointer(u64),
    /// An access falls outside the pool.
    #[error("access of {len} bytes at {addr:#x} is outside the pool")]
    OutOfBounds {
        /// Absolute offset.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// `free` of something that is not an allocated block.
    #[error("free of {0:#x}, which is not an allocated block")]
    InvalidFree(u64),
    /// A concurrent transaction holds what this one needs; engines with internal isolation
    /// retry on it, it never reaches the caller of those.
    #[error("conflict with a concurrent transaction")]
    Conflict,
    /// A parameter is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The pool was formatted by another engine.
    #[error("pool belongs to the {found} engine, not {expected}")]
    WrongEngine {
        /// Engine asked for.
        expected: &'static str,
        /// Engine recorded in the pool.
        found: &'static str,
    },
    /// Persistent state is inconsistent (detected by a checksum or a structural check).
    #[error("corrupt persistent state: {0}")]
    Corrupted(String),
    /// `create` was given a pool whose engine area is not empty: formatting it would lose
    /// what it holds. Open the pool instead, or create a new pool file.
    #[error(
        "the pool already holds {found}; create formats only a fresh pool (open this one, or create a new pool file)"
    )]
    AlreadyFormatted {
        /// What the engine area holds: "the undo engine's area", "the mvcc engine's
        /// area", or "data no engine wrote".
        found: &'static str,
    },
    /// A counter kept in a checked word (the redo sequence, an undo lane's generation) has
    /// no room left below its 48-bit limit: the pool takes no more transactions.
    #[error(
        "{what} has reached the 48-bit limit of its checked word; the pool takes no more transactions"
    )]
    CounterExhausted {
        /// Which counter.
        what: &'static str,
    },
    /// A write-back failed (now or earlier): the pool must be reopened. A transaction that
    /// fails with it may or may not be durable; recovery decides.
    #[error(
        "pool poisoned by a failed write-back; reopen it (the transaction's outcome is unknown)"
    )]
    Poisoned,
    /// The pool could not be created or opened.
    #[error(transparent)]
    Pool(#[from] pmem::PoolError),
}

impl From<heap::HeapError> for TxError {
    fn from(error: heap::HeapError) -> Self {
        match error {
            heap::HeapError::OutOfSpace { size } => TxError::OutOfSpace { size },
            // Under the caller's locks a second free of a block is the caller's error.
            heap::HeapError::InvalidFree(addr) | heap::HeapError::BeingFreed(addr) => {
                TxError::InvalidFree(addr)
            }
            heap::HeapError::InvalidArgument(reason) => TxError::InvalidArgument(reason),
            other => TxError::Corrupted(other.to_string()),
        }
    }
}

impl From<pmem::checked::CheckedError> for TxError {
    fn from(error: pmem::checked::CheckedError) -> Self {
        match error {
            pmem::checked::CheckedError::TooLarge { what, .. } => {
                TxError::CounterExhausted { what }
            }
            bad @ pmem::checked::CheckedError::BadCheck { .. } => {
                TxError::Corrupted(bad.to_string())
            }
        }
    }
}

impl TxError {
    /// An application abort with a reason.
    pub fn abort(reason: impl fmt::Display) -> Self {
        TxError::Aborted(reason.to_string())
    }
}

/// How concurrent transactions are isolated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Isolation {
    /// The engine only makes transactions atomic and durable; callers isolate concurrent
    /// transactions with their own locks, held around the whole `transaction` call (as with
    /// PMDK). Releasing a lock inside the body, before commit, is a bug.
    External,
    /// The engine isolates transactions itself (e.g. MVCC); callers need no locks. At
    /// snapshot isolation (the MVCC engine's default level) only write–write conflicts
    /// abort: two transactions that each read what the other writes may both commit (write
    /// skew). A linked structure whose updates read a neighbour they do not write (unlinking
    /// a node reads its successor's link) needs a serializable level, or the transaction
    /// must also write what it relies on.
    Internal,
}

/// Tag bits of a stored pointer: the high 16 bits hold the pool tag.
const TAG_SHIFT: u32 = 48;
const OFFSET_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// A typed persistent pointer: a pool offset plus the pool's tag. `T` is a marker for the
/// object's layout (it is never stored or dereferenced as a Rust value).
pub struct PPtr<T = ()> {
    word: u64,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.word == other.word
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> std::hash::Hash for PPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.word.hash(state);
    }
}
impl<T> fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "PPtr(null)")
        } else {
            write!(f, "PPtr({:#x}@{:04x})", self.offset(), self.tag())
        }
    }
}

impl<T> PPtr<T> {
    /// The null pointer.
    pub const fn null() -> Self {
        PPtr {
            word: 0,
            _type: PhantomData,
        }
    }

    /// A pointer to `offset` in the pool tagged `tag`. Engines build pointers; workloads get
    /// them from `alloc`, `root` and `read_ptr`.
    pub fn from_parts(tag: u16, offset: u64) -> Self {
        debug_assert!(offset <= OFFSET_MASK && offset != 0 && tag != 0);
        PPtr {
            word: (u64::from(tag) << TAG_SHIFT) | offset,
            _type: PhantomData,
        }
    }

    /// Decodes a stored pointer word without checking it.
    pub const fn from_word(word: u64) -> Self {
        PPtr {
            word,
            _type: PhantomData,
        }
    }

    /// The word stored in PM for this pointer.
    pub const fn word(self) -> u64 {
        self.word
    }

    /// Whether this is the null pointer.
    pub const fn is_null(self) -> bool {
        self.word == 0
    }

    /// Offset in the pool.
    pub const fn offset(self) -> u64 {
        self.word & OFFSET_MASK
    }

    /// Tag of the pool the pointer belongs to.
    pub const fn tag(self) -> u16 {
        (self.word >> TAG_SHIFT) as u16
    }

    /// The same pointer with another layout marker.
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr {
            word: self.word,
            _type: PhantomData,
        }
    }

    /// A pointer `bytes` further into the same object (for arrays of records).
    pub fn offset_by(self, bytes: u64) -> Self {
        PPtr {
            word: self.word + bytes,
            _type: PhantomData,
        }
    }
}

/// The 16-bit tag of a pool, derived from its UUID (never 0, which marks null).
pub fn pool_tag(uuid: &[u8; 16]) -> u16 {
    let tag = u16::from_le_bytes([uuid[0], uuid[1]]) ^ u16::from_le_bytes([uuid[14], uuid[15]]);
    if tag == 0 { 1 } else { tag }
}

/// A fresh engine identity for [`Tx::engine_id`] (never 0), one per opened engine.
pub fn new_engine_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Operations inside one transaction.
///
/// Implementations provide the raw operations on absolute pool offsets; workloads use the
/// typed, checked helpers.
pub trait Tx {
    /// Reads `dst.len()` bytes at absolute offset `addr` (seeing this transaction's writes).
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()>;
    /// Writes `src` at absolute offset `addr`; atomic and durable with the transaction.
    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()>;
    /// Allocates `size` bytes (contents unspecified); undone if the transaction aborts.
    fn alloc_raw(&mut self, size: u64) -> TxResult<u64>;
    /// Frees the block at `addr`; takes effect only if the transaction commits.
    fn free_raw(&mut self, addr: u64) -> TxResult<()>;
    /// The pool's tag.
    fn pool_tag(&self) -> u16;
    /// Absolute offset of the root object.
    fn root_offset(&self) -> u64;

    /// The identity of the opened engine this transaction runs in: unique in the process
    /// among engines that have one (see [`new_engine_id`]), 0 when the engine has none.
    /// Workloads key what they validated once (a structure's header) on it, so operations
    /// on the same open engine skip validating it again; with 0 they validate every time.
    fn engine_id(&self) -> u64 {
        0
    }

    /// Checks that `ptr` is a non-null pointer of this pool.
    fn check<T>(&self, ptr: PPtr<T>) -> TxResult<u64> {
        if ptr.is_null() || ptr.tag() != self.pool_tag() {
            return Err(TxError::InvalidPointer(ptr.word()));
        }
        Ok(ptr.offset())
    }

    /// The root object (a zeroed region at pool creation).
    fn root<T>(&self) -> PPtr<T> {
        PPtr::from_parts(self.pool_tag(), self.root_offset())
    }

    /// Reads bytes of field `field` of `obj`. A field offset so large that the address
    /// overflows is `OutOfBounds`.
    fn read<T>(&mut self, obj: PPtr<T>, field: u64, dst: &mut [u8]) -> TxResult<()> {
        let addr = field_addr(self.check(obj)?, field, dst.len())?;
        self.read_raw(addr, dst)
    }

    /// Writes bytes of field `field` of `obj`. A field offset so large that the address
    /// overflows is `OutOfBounds`.
    fn write<T>(&mut self, obj: PPtr<T>, field: u64, src: &[u8]) -> TxResult<()> {
        let addr = field_addr(self.check(obj)?, field, src.len())?;
        self.write_raw(addr, src)
    }

    /// Reads a little-endian `u64` field.
    fn read_u64<T>(&mut self, obj: PPtr<T>, field: u64) -> TxResult<u64> {
        let mut word = [0u8; 8];
        self.read(obj, field, &mut word)?;
        Ok(u64::from_le_bytes(word))
    }

    /// Writes a little-endian `u64` field.
    fn write_u64<T>(&mut self, obj: PPtr<T>, field: u64, value: u64) -> TxResult<()> {
        self.write(obj, field, &value.to_le_bytes())
    }

    /// Reads a pointer field, checking that it is null or a pointer of this pool.
    fn read_ptr<T, U>(&mut self, obj: PPtr<T>, field: u64) -> TxResult<PPtr<U>> {
        let ptr = PPtr::from_word(self.read_u64(obj, field)?);
        if !ptr.is_null() {
            self.check(ptr)?;
        }
        Ok(ptr)
    }

    /// Writes a pointer field.
    fn write_ptr<T, U>(&mut self, obj: PPtr<T>, field: u64, value: PPtr<U>) -> TxResult<()> {
        if !value.is_null() {
            self.check(value)?;
        }
        self.write_u64(obj, field, value.word())
    }

    /// Allocates an object of `size` bytes (contents unspecified).
    fn alloc<T>(&mut self, size: u64) -> TxResult<PPtr<T>> {
        let offset = self.alloc_raw(size)?;
        Ok(PPtr::from_parts(self.pool_tag(), offset))
    }

    /// Allocates an object of `size` bytes, zero-filled.
    fn alloc_zeroed<T>(&mut self, size: u64) -> TxResult<PPtr<T>> {
        let offset = self.alloc_zeroed_raw(size)?;
        Ok(PPtr::from_parts(self.pool_tag(), offset))
    }

    /// Allocates `size` zero-filled bytes. The default writes the zeros through
    /// [`Tx::write_raw`]; engines override it to zero fresh blocks without logging every byte.
    fn alloc_zeroed_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self.alloc_raw(size)?;
        const ZEROS: [u8; 256] = [0; 256];
        let mut done = 0;
        while done < size {
            let n = (size - done).min(ZEROS.len() as u64);
            self.write_raw(addr + done, &ZEROS[..n as usize])?;
            done += n;
        }
        Ok(addr)
    }

    /// Frees an object.
    fn free<T>(&mut self, obj: PPtr<T>) -> TxResult<()> {
        let offset = self.check(obj)?;
        self.free_raw(offset)
    }
}

/// What an engine's `open` does with its pool when it fails with `error` before the
/// engine exists: a pool it could not recover must not be marked as cleanly closed, but a
/// pool of another engine, which it refused before writing anything, keeps the state it
/// had (a clean pool stays clean).
pub fn refused_open<P: pmem::Persist>(pool: &pmem::Pool<P>, error: &TxError) {
    if !(matches!(error, TxError::WrongEngine { .. }) && pool.was_clean()) {
        pool.mark_unclean_on_drop();
    }
}

/// The absolute address of field `field` of an object at `base`; an address past the end
/// of the address space (which would otherwise wrap to the start of the pool) is
/// `OutOfBounds`.
/// On every read and write of a field: the error is built only when the address wraps
/// (an eager `ok_or` built and dropped one per call, about 370 instructions an operation on
/// ts-hash).
#[inline]
fn field_addr(base: u64, field: u64, len: usize) -> TxResult<u64> {
    match base.checked_add(field) {
        Some(addr) => Ok(addr),
        None => Err(past_the_address_space(len)),
    }
}

#[cold]
fn past_the_address_space(len: usize) -> TxError {
    TxError::OutOfBounds {
        addr: u64::MAX,
        len: len as u64,
    }
}

/// Identifies a registered operation (see [`Op`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u16);

/// What a transaction does, described for engines that make transactions durable by logging
/// the operation instead of the data (the MVCC engine's operation log). `args` is the
/// operation's serialised arguments; together with the persistent state they must determine
/// everything the body does, so recovery can re-execute it through a [`Replay`] handler.
/// Engines that log data ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op<'a> {
    /// Which registered operation.
    pub id: OpId,
    /// Its serialised arguments.
    pub args: &'a [u8],
}

/// Re-executes registered operations during recovery (supplied when an engine that logs
/// operations is opened). `replay` must do exactly what the transaction body that declared
/// `op` did, given the same persistent state.
pub trait Replay: Send + Sync {
    /// Runs operation `op` inside `tx`.
    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()>;

    /// Whether this handler re-executes operation `id` (an engine logs the data of a
    /// transaction whose operation its handler does not know).
    fn handles(&self, id: OpId) -> bool {
        let _ = id;
        true
    }
}

/// A handler that knows no operation: replaying anything is an error.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoReplay;

impl Replay for NoReplay {
    fn handles(&self, _id: OpId) -> bool {
        false
    }

    fn replay<T: Tx>(&self, _tx: &mut T, op: Op<'_>) -> TxResult<()> {
        Err(TxError::InvalidArgument(format!(
            "no handler registered for operation {}",
            op.id.0
        )))
    }
}

/// A transactional persistent heap: the entry point workloads use.
///
/// `transaction` runs `body` atomically and durably: if it returns `Ok` the effects commit;
/// if it returns `Err` (any error type that a [`TxError`] converts into) or panics, every
/// effect is rolled back and the pool stays usable (a panic is then resumed). Engines with
/// internal isolation may run `body` several times (on conflicts), so it must not have side
/// effects outside the transaction that cannot be repeated.
pub trait Engine: Send + Sync {
    /// The transaction handle.
    type Tx<'e>: Tx
    where
        Self: 'e;

    /// Short name for reports (`undo`, `redo`, `pmdk`, ...).
    fn name(&self) -> &'static str;

    /// How concurrent transactions are isolated.
    fn isolation(&self) -> Isolation;

    /// Runs `body` as one failure-atomic transaction. With Ferrite's engines (`undo`,
    /// `redo`, `mvcc`, `mem`), starting another transaction of the same engine inside `body`
    /// (on the same thread) fails with `InvalidArgument` ([`enter`]); the bench harness's
    /// references and the PMDK peer do not check (a nested transaction there may block).
    fn transaction<R, E>(
        &self,
        body: impl FnMut(&mut Self::Tx<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>;

    /// Runs `body` as a read-only transaction (engines may make it cheaper).
    fn read_only<R, E>(&self, body: impl FnMut(&mut Self::Tx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<TxError>,
    {
        self.transaction(body)
    }

    /// Runs `body` as a transaction that performs the registered operation `op` (see
    /// [`Op`]). Engines that log operations record `op` instead of the data it writes; the
    /// default ignores it and runs [`Engine::transaction`].
    fn transaction_op<R, E>(
        &self,
        op: Op<'_>,
        body: impl FnMut(&mut Self::Tx<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let _ = op;
        self.transaction(body)
    }

    /// PM traffic so far (zero for engines without a seam).
    fn counters(&self) -> pmem::Counters;

    /// Completes work an engine defers past its commits (the redo engine's in-place
    /// write-backs), so a benchmark can charge it to the timed operations.
    fn sync(&self) -> TxResult<()> {
        Ok(())
    }

    /// The engine's own event counters (conflicts, checkpoints, ...), cumulative since it
    /// was opened, by name; a benchmark reports their change over its timed runs.
    fn event_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

thread_local! {
    /// The engine (by address) of the innermost transaction running on this thread, 0 if
    /// none: what every transaction's start reads and writes.
    static INNERMOST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The engines of the transactions further out, when transactions of different engines
    /// are nested (rare): the innermost's is in [`INNERMOST`].
    static OUTER: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A transaction of one engine running on this thread (see [`enter`]); leaving it when
/// dropped.
#[derive(Debug)]
pub struct Running {
    /// The innermost engine before this transaction started (0: none).
    outer: usize,
}

/// Marks a transaction of `engine` as running on this thread, refusing a second one: a
/// transaction started inside the body of another transaction of the same engine would
/// wait forever for a lane or a chunk lock the outer one holds, or commit on its own what
/// it read from the outer one's uncommitted writes. Engines call it first thing in
/// [`Engine::transaction`]. The common case (no transaction running) costs one
/// thread-local read and write, inline.
#[inline]
pub fn enter<T: ?Sized>(engine: &T) -> TxResult<Running> {
    let engine = std::ptr::from_ref(engine).cast::<()>().addr();
    let outer = INNERMOST.get();
    if outer != 0 {
        return enter_nested(engine, outer);
    }
    INNERMOST.set(engine);
    Ok(Running { outer })
}

/// [`enter`] inside another transaction: refused if any transaction further out on this
/// thread is `engine`'s.
#[cold]
#[inline(never)]
fn enter_nested(engine: usize, outer: usize) -> TxResult<Running> {
    if outer == engine || OUTER.with_borrow(|further| further.contains(&engine)) {
        return Err(TxError::InvalidArgument(
            "a transaction was started inside a transaction of the same engine on the same \
             thread; nested transactions are not supported (call the inner body with the \
             outer transaction's handle instead)"
                .into(),
        ));
    }
    OUTER.with_borrow_mut(|further| further.push(outer));
    INNERMOST.set(engine);
    Ok(Running { outer })
}

impl Drop for Running {
    #[inline]
    fn drop(&mut self) {
        // Transactions end in the reverse order they started (each guard lives in its
        // engine's `transaction` call), so the one further out is the last pushed.
        INNERMOST.set(self.outer);
        if self.outer != 0 {
            leave_nested();
        }
    }
}

#[cold]
#[inline(never)]
fn leave_nested() {
    let _ = OUTER.try_with(|further| further.borrow_mut().pop());
}

/// The end of a transaction, as an engine implements it.
pub trait Lifecycle {
    /// Makes the transaction's effects durable (or fails before anything is durable).
    fn commit(&mut self) -> TxResult<()>;
    /// Undoes every effect of the transaction.
    fn abort(&mut self);
}

/// Runs `body` on `tx` with the semantics of [`Engine::transaction`]: commit when it returns
/// `Ok`; abort when it returns `Err`, when the commit fails, or when it panics (the panic is
/// then resumed, after the abort, with the pool usable).
pub fn run_transaction<T: Lifecycle, R, E: From<TxError>>(
    mut tx: T,
    mut body: impl FnMut(&mut T) -> Result<R, E>,
) -> Result<R, E> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut tx)));
    match outcome {
        Ok(Ok(value)) => match tx.commit() {
            Ok(()) => Ok(value),
            Err(error) => {
                tx.abort();
                Err(E::from(error))
            }
        },
        Ok(Err(error)) => {
            tx.abort();
            Err(error)
        }
        Err(panic) => {
            tx.abort();
            drop(tx);
            std::panic::resume_unwind(panic)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_words_round_trip_and_keep_their_tag() {
        let ptr: PPtr<u8> = PPtr::from_parts(0xBEEF, 0x1234_5678);
        assert_eq!((ptr.tag(), ptr.offset()), (0xBEEF, 0x1234_5678));
        assert_eq!(PPtr::<u8>::from_word(ptr.word()), ptr);
        assert!(PPtr::<u8>::null().is_null());
        assert_eq!(ptr.offset_by(64).offset(), 0x1234_5678 + 64);
    }

    /// A transaction over a 1 MiB byte array, recording what it was asked for.
    struct Flat {
        bytes: Vec<u8>,
    }

    impl Tx for Flat {
        fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
            let len = dst.len() as u64;
            let end = addr
                .checked_add(len)
                .filter(|&end| end <= self.bytes.len() as u64);
            let end = end.ok_or(TxError::OutOfBounds { addr, len })?;
            dst.copy_from_slice(&self.bytes[addr as usize..end as usize]);
            Ok(())
        }
        fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
            let len = src.len() as u64;
            let end = addr
                .checked_add(len)
                .filter(|&end| end <= self.bytes.len() as u64);
            let end = end.ok_or(TxError::OutOfBounds { addr, len })?;
            self.bytes[addr as usize..end as usize].copy_from_slice(src);
            Ok(())
        }
        fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
            Err(TxError::OutOfSpace { size })
        }
        fn free_raw(&mut self, addr: u64) -> TxResult<()> {
            Err(TxError::InvalidFree(addr))
        }
        fn pool_tag(&self) -> u16 {
            7
        }
        fn root_offset(&self) -> u64 {
            4096
        }
    }

    /// A field offset that makes the address overflow is out of bounds; it used to wrap
    /// around (in release builds) to the pool's first bytes, the header, and read or write
    /// them.
    #[test]
    fn a_field_offset_past_the_address_space_is_out_of_bounds() {
        let mut tx = Flat {
            bytes: vec![0xAA; 1 << 20],
        };
        let root = tx.root::<()>();
        // 4096 + (2^64 - 4096) wraps to 0.
        let wrapping = 0u64.wrapping_sub(4096);
        assert!(matches!(
            tx.read_u64(root, wrapping),
            Err(TxError::OutOfBounds { .. })
        ));
        assert!(matches!(
            tx.write_u64(root, wrapping, 1),
            Err(TxError::OutOfBounds { .. })
        ));
        assert!(
            tx.bytes[..8].iter().all(|&b| b == 0xAA),
            "the header was written"
        );
        assert_eq!(
            tx.read_u64(root, 8).expect("in bounds"),
            0xAAAA_AAAA_AAAA_AAAA
        );
    }

    /// A heap parameter out of range (such as a chunk size) is the caller's invalid argument,
    /// not corrupt persistent state.
    #[test]
    fn an_invalid_heap_argument_is_an_invalid_argument() {
        let error = TxError::from(heap::HeapError::InvalidArgument("chunk size".into()));
        assert!(matches!(error, TxError::InvalidArgument(_)), "{error:?}");
    }

    #[test]
    fn pool_tags_are_never_zero() {
        assert_ne!(pool_tag(&[0; 16]), 0);
    }
}
