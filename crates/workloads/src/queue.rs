//! Silo's Queue micro-benchmark: a persistent FIFO queue of fixed-size items.
//!
//! Persistent layout (little-endian, byte offsets):
//!
//! ```text
//! header (40 B)                         node (8 + value_size B)
//!   0  magic      u64 "FRQUEUE1"          0  next   ptr (towards the tail, or null)
//!   8  value_size u64                     8  value  [u8; value_size]
//!  16  head       ptr (oldest, or null)
//!  24  count      u64
//!  32  tail       ptr (newest, or null)
//! ```
//!
//! `head`, `count`, `tail` are adjacent in that order so that an enqueue writes `count` and
//! `tail` and a dequeue `head` and `count` with one access each (all three when the queue
//! becomes or stops being empty).
//!
//! Each operation is one transaction that either enqueues a new item or dequeues the oldest
//! (50/50, drawn by [`op_rng`]); a dequeue of an empty queue does nothing. Setup enqueues
//! `params.keys` items. Under external isolation every operation takes one global lock (both
//! kinds write the header). Invariants: following `next` from `head` reaches exactly `count`
//! distinct nodes, the last of which is `tail`; the queue is empty iff `head` and `tail` are
//! null.

use crate::locks::StripedLocks;
use crate::{OpKind, Params, Workload, op_rng, root_link, set_root_link, value_for};
use rand::Rng;
use std::collections::{HashSet, VecDeque};
use tx::{Engine, PPtr, Tx, TxError, TxResult};

const MAGIC: u64 = u64::from_le_bytes(*b"FRQUEUE1");

const H_MAGIC: usize = 0;
const H_VALUE_SIZE: usize = 8;
const H_HEAD: usize = 16;
const H_COUNT: usize = 24;
const H_TAIL: usize = 32;
const HEADER_SIZE: usize = 40;

const N_NEXT: usize = 0;
const N_VALUE: usize = 8;

/// Bytes of the header block, for sizing a pool before setup (`bench::space`).
pub const HEADER_BYTES: u64 = HEADER_SIZE as u64;
/// Bytes of a node before its value.
pub const NODE_BYTES_BEFORE_VALUE: u64 = N_VALUE as u64;

enum Header {}
enum Node {}

fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn corrupt(what: impl std::fmt::Display) -> TxError {
    TxError::Corrupted(format!("queue: {what}"))
}

/// The queue workload.
#[derive(Debug)]
pub struct QueueWorkload {
    params: Params,
    lock: StripedLocks,
}

/// The header, read with one access and checked; kept in step with every write.
struct Queue {
    header: PPtr<Header>,
    head: PPtr<Node>,
    count: u64,
    tail: PPtr<Node>,
}

impl Queue {
    fn open<T: Tx>(tx: &mut T, value_size: u32) -> TxResult<Queue> {
        let header = root_link(tx)?.cast::<Header>();
        let mut buf = [0u8; HEADER_SIZE];
        tx.read(header, 0, &mut buf)?;
        if word(&buf, H_MAGIC) != MAGIC {
            return Err(corrupt("bad magic"));
        }
        if word(&buf, H_VALUE_SIZE) != u64::from(value_size) {
            return Err(corrupt(format_args!(
                "value size {}",
                word(&buf, H_VALUE_SIZE)
            )));
        }
        let queue = Queue {
            header,
            head: PPtr::from_word(word(&buf, H_HEAD)),
            count: word(&buf, H_COUNT),
            tail: PPtr::from_word(word(&buf, H_TAIL)),
        };
        for end in [queue.head, queue.tail] {
            if !end.is_null() {
                tx.check(end)?;
            }
        }
        if queue.head.is_null() != queue.tail.is_null()
            || queue.head.is_null() != (queue.count == 0)
        {
            return Err(corrupt(format_args!(
                "head {:?}, tail {:?} and count {} disagree",
                queue.head, queue.tail, queue.count
            )));
        }
        Ok(queue)
    }

    /// Writes header words `from..to` (indexes of head, count, tail) from the image.
    fn write_header<T: Tx>(&self, tx: &mut T, fields: std::ops::Range<usize>) -> TxResult<()> {
        let words = [self.head.word(), self.count, self.tail.word()];
        let mut buf = [0u8; 24];
        for (i, w) in words[fields.clone()].iter().enumerate() {
            buf[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        let at = H_HEAD + 8 * fields.start;
        tx.write(self.header, at as u64, &buf[..8 * fields.len()])
    }

    fn enqueue<T: Tx>(&mut self, tx: &mut T, value: &[u8]) -> TxResult<()> {
        let node: PPtr<Node> = tx.alloc((N_VALUE + value.len()) as u64)?;
        let mut image = Vec::with_capacity(N_VALUE + value.len());
        image.extend_from_slice(&0u64.to_le_bytes());
        image.extend_from_slice(value);
        tx.write(node, 0, &image)?;
        let was_empty = self.tail.is_null();
        if !was_empty {
            tx.write_ptr(self.tail, N_NEXT as u64, node)?;
        }
        (self.count, self.tail) = (self.count + 1, node);
        if was_empty {
            self.head = node;
            return self.write_header(tx, 0..3);
        }
        self.write_header(tx, 1..3)
    }

    /// Removes the oldest item into `value`; false if the queue is empty.
    fn dequeue<T: Tx>(&mut self, tx: &mut T, value: &mut [u8]) -> TxResult<bool> {
        let node = self.head;
        if node.is_null() {
            return Ok(false);
        }
        let mut image = vec![0u8; N_VALUE + value.len()];
        tx.read(node, 0, &mut image)?;
        value.copy_from_slice(&image[N_VALUE..]);
        let next = PPtr::from_word(word(&image, N_NEXT));
        (self.head, self.count) = (next, self.count - 1);
        if next.is_null() {
            self.tail = PPtr::null();
            self.write_header(tx, 0..3)?;
        } else {
            tx.check(next)?;
            self.write_header(tx, 0..2)?;
        }
        tx.free(node)?;
        Ok(true)
    }
}

impl QueueWorkload {
    /// The workload: `params.keys` initial items of `params.value_size` bytes.
    pub fn new(params: Params) -> Self {
        let lock = StripedLocks::for_workload(&params, 1);
        QueueWorkload { params, lock }
    }

    /// The item enqueued by operation `index` of `thread`, or `None` for a dequeue.
    fn decide(&self, thread: usize, index: u64) -> Option<Vec<u8>> {
        let mut rng = op_rng(self.params.seed, thread, index);
        rng.random_bool(0.5).then(|| {
            let id = ((thread as u64) << 40) | index;
            value_for(id, 1, self.params.value_size)
        })
    }
}

impl Workload for QueueWorkload {
    type Model = VecDeque<Vec<u8>>;

    fn name(&self) -> String {
        "queue".into()
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        let size = self.params.value_size;
        engine.transaction(|tx| {
            let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
            let mut buf = [0u8; HEADER_SIZE];
            buf[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
            buf[H_VALUE_SIZE..H_VALUE_SIZE + 8].copy_from_slice(&u64::from(size).to_le_bytes());
            tx.write(header, 0, &buf)?;
            set_root_link(tx, header.cast())
        })?;
        // Batches bounded in bytes, as the maps load theirs: 64 items of 16 KiB were one
        // record larger than a 1 MiB lane.
        let batch = crate::list::entries_per_load_tx(size as usize) as u64;
        let mut first = 0;
        while first < self.params.keys {
            let end = (first + batch).min(self.params.keys);
            engine.transaction(|tx| {
                let mut queue = Queue::open(tx, size)?;
                (first..end).try_for_each(|i| queue.enqueue(tx, &value_for(i, 0, size)))
            })?;
            first = end;
        }
        Ok(())
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        let item = self.decide(thread, index);
        let size = self.params.value_size;
        let _held = self.lock.write(engine.isolation(), 0);
        let mut out = vec![0u8; size as usize];
        engine.transaction(|tx| {
            let mut queue = Queue::open(tx, size)?;
            match &item {
                Some(value) => queue.enqueue(tx, value).map(|()| OpKind::Insert),
                None => Ok(if queue.dequeue(tx, &mut out)? {
                    OpKind::Delete
                } else {
                    OpKind::Read
                }),
            }
        })
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String> {
        let mut content = None;
        engine
            .read_only(|tx| {
                content = Some(walk(tx, self.params.value_size));
                Ok::<_, TxError>(())
            })
            .map_err(|e| e.to_string())?;
        content.unwrap_or_else(|| Err("queue: check did not run".into()))
    }

    fn initial_model(&self) -> Self::Model {
        (0..self.params.keys)
            .map(|i| value_for(i, 0, self.params.value_size))
            .collect()
    }

    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64) {
        match self.decide(thread, index) {
            Some(value) => model.push_back(value),
            None => {
                model.pop_front();
            }
        }
    }
}

/// Walks the queue from the head: distinct nodes (visited set), `count` of them, the last one
/// the tail; returns the items oldest first.
fn walk<T: Tx>(tx: &mut T, value_size: u32) -> Result<VecDeque<Vec<u8>>, String> {
    let queue = Queue::open(tx, value_size).map_err(|e| e.to_string())?;
    let mut items = VecDeque::new();
    let mut visited = HashSet::new();
    let mut image = vec![0u8; N_VALUE + value_size as usize];
    let (mut cur, mut last) = (queue.head, PPtr::null());
    while !cur.is_null() {
        if !visited.insert(cur.offset()) {
            return Err(format!("queue: node {cur:?} is reached twice"));
        }
        tx.read(cur, 0, &mut image).map_err(|e| e.to_string())?;
        items.push_back(image[N_VALUE..].to_vec());
        last = cur;
        cur = PPtr::from_word(word(&image, N_NEXT));
        if !cur.is_null() {
            tx.check(cur).map_err(|e| e.to_string())?;
        }
    }
    if last != queue.tail {
        return Err(format!(
            "queue: the last node is {last:?}, the tail {:?}",
            queue.tail
        ));
    }
    if items.len() as u64 != queue.count {
        return Err(format!(
            "queue: count is {} but {} nodes are linked",
            queue.count,
            items.len()
        ));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::MemEngine;

    fn params(keys: u64) -> Params {
        Params {
            keys,
            value_size: 16,
            ..Params::default()
        }
    }

    #[test]
    fn checker_catches_a_broken_link_a_cycle_and_a_wrong_tail() {
        let engine = MemEngine::new(1 << 20);
        let workload = QueueWorkload::new(params(10));
        workload.setup(&engine).expect("setup");
        assert!(workload.check(&engine).is_ok());
        let (header, head) = engine
            .transaction(|tx| {
                let header = root_link(tx)?;
                let head: PPtr<Node> = tx.read_ptr(header, H_HEAD as u64)?;
                Ok::<_, TxError>((header, head))
            })
            .expect("read");
        let poke = |obj: PPtr<()>, at: usize, value: u64| {
            engine
                .transaction(|tx| tx.write_u64(obj, at as u64, value))
                .expect("poke");
        };
        let second = engine.transaction(|tx| tx.read_u64(head, 0)).expect("read");
        poke(head.cast(), N_NEXT, 0x7777);
        assert!(workload.check(&engine).is_err(), "bad pointer");
        poke(head.cast(), N_NEXT, head.word());
        assert!(workload.check(&engine).is_err(), "cycle");
        poke(head.cast(), N_NEXT, second);
        assert!(workload.check(&engine).is_ok());
        poke(header, H_TAIL, head.word());
        assert!(workload.check(&engine).is_err(), "tail");
    }
}
